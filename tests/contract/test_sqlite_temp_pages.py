"""Where SQLite keeps temporary pages: in memory for the daemon's short statements, in files
for `migrate`, which may rewrite whole tables (docs/decisions/0058)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from qinglong_dispatcher.adapters.sqlite import database, migrations
from tests.support.clock import START_MS

MEMORY = 2
FILE = 1


def _temp_store(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA temp_store").fetchone()[0])


def test_a_connection_keeps_its_statement_journals_in_memory(tmp_path: Path) -> None:
    conn = database.connect(tmp_path / "q.db", busy_timeout_s=1.0)
    try:
        assert _temp_store(conn) == MEMORY
    finally:
        conn.close()


def _migrate_traced(path: Path) -> tuple[list[str], int]:
    """The statements `migrate` ran on a daemon's connection, and its temp_store after."""
    conn = database.connect(path, busy_timeout_s=1.0)
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: seen.append(" ".join(sql.split())))
    try:
        migrations.migrate(conn, now_ms=START_MS)
        return seen, _temp_store(conn)
    finally:
        conn.close()


def _between_files_and_back(seen: list[str], statement: str) -> bool:
    """Whether `statement` ran after `migrate` moved temporary pages to files, and before it
    gave the connection back as it was (in memory)."""
    to_files = seen.index("PRAGMA temp_store = FILE")
    back = max(i for i, sql in enumerate(seen) if sql.startswith("PRAGMA temp_store = "))
    ran = next(i for i, sql in enumerate(seen) if sql.startswith(statement))
    return to_files < ran < back and seen[back] == f"PRAGMA temp_store = {MEMORY}"


def test_migrate_and_its_vacuum_use_files_and_give_the_connection_back_in_memory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    seen, after = _migrate_traced(path)
    assert _between_files_and_back(seen, "CREATE TABLE")
    assert after == MEMORY

    # A file of an older release (no auto-vacuum): migrate rewrites it whole, once.
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("PRAGMA auto_vacuum = NONE")
    old.execute("VACUUM")
    old.close()
    seen, after = _migrate_traced(path)
    assert _between_files_and_back(seen, "VACUUM")
    assert after == MEMORY
