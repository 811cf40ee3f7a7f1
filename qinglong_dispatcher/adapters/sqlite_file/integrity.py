"""The start-up check of the SQLite file: `run` and `tick` refuse a damaged one.

A page overwritten by a bad disk, a copy taken mid-write or a stray tool otherwise surfaces
later as an odd error in the middle of a dispatch; checked at start, it is one line naming
the file (exit 69) before anything is claimed.
"""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher.domain import errors

MAX_REPORTED = 1
"""`quick_check(N)` stops after N problems: the first one is enough to refuse the file."""

MAX_PROBLEM_CHARS = 160


def quick_check(conn: sqlite3.Connection) -> str | None:
    """The first problem `PRAGMA quick_check` finds, or None for a sound file.

    quick_check reads every page once (B-tree structure, free list, record formats) but skips
    the index-to-table cross-checks of `integrity_check`, so its cost is linear in the file
    size (docs/operations.md). Its messages name pages and trees, never row
    contents. SQLite's own refusal to read a page (SQLITE_CORRUPT, SQLITE_NOTADB) counts as
    a problem too.
    """
    try:
        row = conn.execute(f"PRAGMA quick_check({MAX_REPORTED})").fetchone()
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            return str(exc)[:MAX_PROBLEM_CHARS]
        raise
    if row is None:
        raise errors.StoreCorrupted("quick_check returned nothing")
    first = str(row[0])
    return None if first == "ok" else " ".join(first.split())[:MAX_PROBLEM_CHARS]
