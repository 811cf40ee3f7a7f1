"""Applies and verifies the SQLite migrations, each file in its own BEGIN IMMEDIATE."""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.adapters.sqlite import database
from qinglong_dispatcher.adapters.sqlite_file import space
from qinglong_dispatcher.domain import schema

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    checksum      TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
) STRICT
"""


def _statements(sql: str) -> list[str]:
    """Split a file into statements; trigger bodies keep their inner semicolons."""
    statements: list[str] = []
    current: list[str] = []
    for line in sql.splitlines(keepends=True):
        current.append(line)
        text = "".join(current)
        if sqlite3.complete_statement(text):
            if text.strip():
                statements.append(text.strip())
            current = []
    tail = "".join(current).strip()
    if tail and not all(ln.strip().startswith("--") or not ln.strip() for ln in current):
        statements.append(tail)
    return statements


def _applied(conn: sqlite3.Connection) -> dict[int, str]:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return {}
    return {
        int(row["version"]): str(row["checksum"])
        for row in conn.execute("SELECT version, checksum FROM schema_migrations")
    }


def state(conn: sqlite3.Connection) -> schema.SchemaState:
    """Compare the database with this release's files."""
    return schema.compare(migration_files.load("sqlite"), _applied(conn))


def migrate(conn: sqlite3.Connection, *, now_ms: int) -> list[int]:
    """Apply pending migrations in order; refuse a tampered or newer schema. Returns versions.

    A migration, and the one `VACUUM` of a file from an older release, may rewrite whole
    tables: meanwhile their temporary pages go to files, never to the memory the connection
    otherwise keeps them in (`database.connect`)."""
    kept = int(conn.execute("PRAGMA temp_store").fetchone()[0])
    conn.execute("PRAGMA temp_store = FILE")
    try:
        return _apply(conn, now_ms=now_ms)
    finally:
        conn.execute(f"PRAGMA temp_store = {kept}")  # an int read back: no value from outside


def _apply(conn: sqlite3.Connection, *, now_ms: int) -> list[int]:
    applied_now: list[int] = []
    files = migration_files.load("sqlite")
    # Before the first table of a new file; a file from an older release is rewritten once.
    space.ensure_incremental(conn)

    def ledger(c: sqlite3.Connection) -> None:
        c.execute(_LEDGER)

    database.in_transaction(conn, ledger)
    while True:
        # The write lock is held from BEGIN IMMEDIATE, so a concurrent migrate waits its turn.
        def step(c: sqlite3.Connection) -> int | None:
            current = schema.compare(files, _applied(c))
            if current.tampered or current.unknown:
                current.require_current()
            if not current.pending:
                return None
            migration = current.pending[0]
            for statement in _statements(migration.sql):
                c.execute(statement)
            c.execute(
                "INSERT INTO schema_migrations (version, name, checksum, applied_at_ms) "
                "VALUES (?, ?, ?, ?)",
                (migration.version, migration.name, migration.checksum, now_ms),
            )
            return migration.version

        version = database.in_transaction(conn, step)
        if version is None:
            return applied_now
        applied_now.append(version)
