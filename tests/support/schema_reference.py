"""The reference schema of each dialect: what a fresh migration of the whole chain leaves.

`docs/schema/sqlite.sql` and `docs/schema/postgres.sql` hold the current body of every table,
index, trigger, function and grant in one file per dialect, so a reader never has to replay
the migrations that redefined a rule. `tests/contract/test_schema_reference.py` regenerates
both from fresh databases and compares; after a new migration, rewrite them with

    .venv/bin/python -m tests.support.schema_reference --write

Each is read in a fixed order from a database migrated for the purpose (PostgreSQL's from the
catalogs, `postgres_catalog.py`), the installation's name and the administrator's replaced
by fixed ones, so it depends on nothing but the migration files (and the PostgreSQL major
version, whose deparser writes the function, index and constraint texts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg

from qinglong_dispatcher.domain import installation
from tests.support import postgres_catalog, stores
from tests.support.clock import START_MS

ROOT = Path(__file__).resolve().parents[2]
FILES = {"sqlite": ROOT / "docs" / "schema" / "sqlite.sql",
         "postgres": ROOT / "docs" / "schema" / "postgres.sql"}  # fmt: skip
REGENERATE = "python -m tests.support.schema_reference --write"

_HEADER = """\
-- The {dialect} schema a fresh `migrate` leaves: every migration of migrations/{dialect}/ applied.
-- Generated; do not edit. A test compares it with a fresh migration; after a new migration run
--     {regenerate}
-- (docs/schema/README.md says what is in it and in which order).
"""

# -- SQLite ----------------------------------------------------------------------------------

_SQLITE_ORDER = ("table", "index", "trigger", "view")
_SQLITE_SETTINGS = ("journal_mode", "auto_vacuum", "user_version", "application_id")
_PLURAL = {"table": "tables", "index": "indexes", "trigger": "triggers", "view": "views"}


def _sqlite_text(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
        ).fetchall()
        # The settings a file keeps (in its header), as `migrate` leaves them.
        settings = "-- file settings\n" + "".join(
            f"PRAGMA {pragma} = {conn.execute(f'PRAGMA {pragma}').fetchone()[0]};\n"
            for pragma in _SQLITE_SETTINGS
        )
    finally:
        conn.close()
    rows.sort(key=lambda row: (_SQLITE_ORDER.index(row[0]), row[1]))
    parts = [_HEADER.format(dialect="sqlite", regenerate=REGENERATE), settings]
    for kind in _SQLITE_ORDER:
        chosen = [(name, sql) for type_, name, sql in rows if type_ == kind]
        if chosen:
            parts.append(f"-- {_PLURAL[kind]} ({len(chosen)})\n")
            parts.extend(f"-- {kind} {name}\n{sql.strip()};\n" for name, sql in chosen)
    return "\n".join(parts)


async def sqlite_reference() -> str:
    """The SQLite reference: `sqlite_master` of a freshly migrated file, by kind and name."""
    with tempfile.TemporaryDirectory(prefix="qinglong-schema-") as directory:
        path = Path(directory) / "store.db"
        store = await stores.open_sqlite(path, busy_timeout_s=5.0)
        try:
            await store.migrate(now_ms=START_MS)
        finally:
            await store.close()
        return _sqlite_text(path)


# -- PostgreSQL ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _scratch_database() -> AsyncIterator[str]:
    """An empty database (from `template0`: nothing another made in `template1` shows) named
    as an installation of this process (so the suite's clean-up
    of dead sessions knows it), dropped afterwards with the roles `migrate` made for it."""
    name = stores.session_installation("schema")
    admin = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        await admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    finally:
        await admin.close()
    try:
        yield name
    finally:
        admin = await asyncpg.connect(stores.admin_dsn(), timeout=5)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            for role in installation.roles(name):
                with contextlib.suppress(asyncpg.PostgresError):
                    await admin.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await admin.close()


async def postgres_reference() -> str:
    """The PostgreSQL reference: schema `qinglong` of a fresh database of a new installation,
    migrated by the administrator (`QINGLONG_TEST_PG_DSN`), read from the catalogs."""
    async with _scratch_database() as name:
        store = await stores.open_postgres(stores.pg_url(name), max_size=1, installation=name)
        try:
            await store.migrate(now_ms=START_MS)
        finally:
            await store.close()
        conn = await asyncpg.connect(stores.pg_url(name), timeout=5)
        try:
            # Every name the deparser writes is then schema-qualified, whoever reads.
            await conn.execute("SET search_path = pg_catalog")
            administrator = str(await conn.fetchval("SELECT current_user"))
            body = await postgres_catalog.describe(conn, name, administrator)
            return _HEADER.format(dialect="postgres", regenerate=REGENERATE) + "\n" + body
        finally:
            await conn.close()


async def reference(dialect: str) -> str:
    """The reference schema of `dialect`, regenerated."""
    return await (sqlite_reference() if dialect == "sqlite" else postgres_reference())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.schema_reference",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--write", action="store_true", help="rewrite docs/schema/*.sql")
    parser.add_argument("--dialect", choices=sorted(FILES), action="append",
                        help="only this dialect (default: both)")  # fmt: skip
    args = parser.parse_args(argv)
    stale = []
    for dialect in args.dialect or sorted(FILES):
        try:
            text = asyncio.run(reference(dialect))
        except RuntimeError as exc:
            print(f"{dialect}: {exc}", file=sys.stderr)
            return 1
        path = FILES[dialect]
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
        else:
            stale.append(str(path.relative_to(ROOT)))
    if stale:
        print(f"out of date: {', '.join(stale)}; run {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
