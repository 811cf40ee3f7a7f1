"""Giving pruned space back: the file's incremental auto-vacuum mode and its vacuum step.

Deleted rows leave free pages inside the file; without auto-vacuum SQLite reuses them but
never shrinks the file. With `auto_vacuum = INCREMENTAL` the daemon hands up to N free pages
back per pass (`PRAGMA incremental_vacuum(N)`), a short write instead of a whole `VACUUM`.
"""

from __future__ import annotations

import sqlite3

INCREMENTAL = 2
"""`PRAGMA auto_vacuum` value of incremental mode (0 none, 1 full)."""


def auto_vacuum_mode(conn: sqlite3.Connection) -> int:
    """The file's auto-vacuum mode."""
    return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])


def ensure_incremental(conn: sqlite3.Connection) -> bool:
    """Put the file in incremental auto-vacuum mode; True when it was converted now.

    The pragma alone takes effect only on a file with no page written yet, and opening in WAL
    mode already writes the header; otherwise only a `VACUUM` changes the mode (it rewrites
    the whole file once: instant for a new file, and it needs as much free disk again for an
    old one). Both run outside a transaction, so this runs before any migration transaction.
    """
    if auto_vacuum_mode(conn) == INCREMENTAL:
        return False
    conn.execute(f"PRAGMA auto_vacuum = {INCREMENTAL}")
    if auto_vacuum_mode(conn) != INCREMENTAL:
        conn.execute("VACUUM")
    return True


def incremental_vacuum(conn: sqlite3.Connection, max_pages: int) -> int:
    """Free up to `max_pages` pages at the end of the file (its own short write); how many."""
    before = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    # A pragma takes no bound parameter (hence the int). It frees one page per step and
    # returns no row, so execute() (even with fetchall) frees a single page; executescript
    # steps it to the end. It runs outside a transaction here, which executescript requires.
    conn.executescript(f"PRAGMA incremental_vacuum({int(max_pages)});")
    after = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return before - after
