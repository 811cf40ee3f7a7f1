"""Applies and verifies the PostgreSQL migrations: roles, schema, one file per transaction.

`migrate` connects as an administrator (a superuser, or the database owner with CREATEROLE).
It holds a session advisory lock for the whole run, so two `migrate` of one database take
turns; creates the NOLOGIN roles if missing (roles are cluster-wide, so two databases
of one server may race to create them: the loser's duplicate is swallowed); creates the
schema owned by `qinglong_migrator`; and runs every file with `SET LOCAL ROLE
qinglong_migrator`, so the migrator owns every object it creates.
"""

from __future__ import annotations

import contextlib
import re

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.domain import errors, schema

SCHEMA = "qinglong"
MIGRATOR, RUNTIME, OPERATOR = "qinglong_migrator", "qinglong_runtime", "qinglong_operator"
APPROVER, SELF_APPROVER = "qinglong_approver", "qinglong_self_approver"
PRUNER = "qinglong_pruner"
"""The only role granted DELETE, and then only of finished dispatch trees (migration 0009)."""
RECORDER = "qinglong_recorder"
"""Owns the definer functions that append audit rows and ledger lines, and may do only that
(migration 0011): nobody logs in as it or is granted it, but the migrator (to hand it its
functions)."""
ROLES = (MIGRATOR, RUNTIME, OPERATOR, APPROVER, SELF_APPROVER, PRUNER, RECORDER)
"""`qinglong_self_approver` holds no privilege: the approval trigger reads the membership."""

LOCK_KEY = 0x716C_6D69_6772
"""The advisory lock key of `migrate` ("qlmigr"); advisory locks are per database."""

LOCK_WAIT_MS = 300_000
"""How long a second `migrate` waits for the first before giving up."""

FILE_TIMEOUT_S = 3600.0
"""Client-side bound on one migration file (the pool's default is sized for OLTP statements)."""

_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_LEDGER = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    checksum      TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL
);
-- The runtime, operators and approvers read the ledger (every command refuses an unmigrated
-- schema) and need the schema itself; table privileges come with each migration file.
GRANT USAGE ON SCHEMA {SCHEMA} TO {RUNTIME}, {OPERATOR}, {APPROVER};
GRANT SELECT ON {SCHEMA}.schema_migrations TO {RUNTIME}, {OPERATOR}, {APPROVER};
"""

_LEDGER_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables "
    "WHERE schemaname = $1 AND tablename = 'schema_migrations')"
)


def ensure_roles_sql(names: tuple[str, ...] = ROLES) -> str:
    """One DO block creating each NOLOGIN role unless it exists; a concurrent creator wins."""
    for name in names:
        if not _ROLE_NAME.fullmatch(name):
            raise ValueError(f"not a plain role name: {name!r}")
    steps = "\n".join(
        f"""    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{name}') THEN
        BEGIN
            CREATE ROLE {name} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database of this server created it at the same moment
        END;
    END IF;"""
        for name in names
    )
    return f"DO $roles$\nBEGIN\n{steps}\nEND\n$roles$"


async def ensure_roles(conn: db.Connection, names: tuple[str, ...] = ROLES) -> None:
    """Create the roles if missing, in a transaction of their own (committed at once)."""
    await conn.execute(ensure_roles_sql(names))


async def _applied(conn: db.Connection) -> dict[int, str]:
    if not await conn.fetchval(_LEDGER_EXISTS, SCHEMA):
        return {}
    rows = await conn.fetch(f"SELECT version, checksum FROM {SCHEMA}.schema_migrations")
    return {int(row["version"]): str(row["checksum"]) for row in rows}


async def state(conn: db.Connection) -> schema.SchemaState:
    """Compare the database with this release's files."""
    return schema.compare(migration_files.load("postgres"), await _applied(conn))


async def _become_migrator(conn: db.Connection) -> None:
    """Let a non-superuser administrator act as the migrator (a superuser already may)."""
    allowed = await conn.fetchval(
        "SELECT rolsuper OR pg_catalog.pg_has_role(current_user, $1, 'MEMBER') "
        "FROM pg_catalog.pg_roles WHERE rolname = current_user",
        MIGRATOR,
    )
    if not allowed:
        await conn.execute(f"GRANT {MIGRATOR} TO CURRENT_USER")
    # Handing a function to the recorder needs membership in it; nothing else is a member.
    granted = await conn.fetchval(
        "SELECT pg_catalog.pg_has_role($1, $2, 'MEMBER')", MIGRATOR, RECORDER
    )
    if not granted:
        await conn.execute(f"GRANT {RECORDER} TO {MIGRATOR}")


async def _prepare(conn: db.Connection) -> None:
    await ensure_roles(conn)
    await _become_migrator(conn)
    async with conn.transaction():
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA} AUTHORIZATION {MIGRATOR}")
        await conn.execute(f"SET LOCAL ROLE {MIGRATOR}")
        await conn.execute(_LEDGER)


async def _apply_next(
    conn: db.Connection, files: tuple[schema.Migration, ...], *, now_ms: int
) -> int | None:
    """Apply the first pending file in one transaction; None when nothing is pending."""
    async with conn.transaction():
        # DDL may take long on a big table; lock_timeout still bounds waiting on the runtime.
        await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute(f"SET LOCAL ROLE {MIGRATOR}")
        current = schema.compare(files, await _applied(conn))
        if current.tampered or current.unknown:
            current.require_current()
        if not current.pending:
            return None
        migration = current.pending[0]
        await conn.execute(migration.sql, timeout=FILE_TIMEOUT_S)
        await conn.execute(
            f"INSERT INTO {SCHEMA}.schema_migrations (version, name, checksum, applied_at_ms) "
            "VALUES ($1, $2, $3, $4)",
            migration.version,
            migration.name,
            migration.checksum,
            now_ms,
        )
        return migration.version


async def migrate(conn: db.Connection, *, now_ms: int) -> list[int]:
    """Apply pending migrations in order; refuse a tampered or newer schema. Returns versions."""
    files = migration_files.load("postgres")
    async with conn.transaction():
        # A session lock outlives this transaction; its wait is bounded here, not by the pool.
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
        await conn.execute(f"SET LOCAL statement_timeout = {LOCK_WAIT_MS}")
        await conn.execute(
            "SELECT pg_catalog.pg_advisory_lock($1)", LOCK_KEY, timeout=LOCK_WAIT_MS / 1000 + 5
        )
    try:
        try:
            await _prepare(conn)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) == "42501":
                raise errors.StoreError(
                    "migrate needs an administrator: a superuser, or the database owner with "
                    f"CREATEROLE ({exc.args[0] if exc.args else 'permission denied'})",
                    code="permission_denied",
                ) from exc
            raise
        applied_now: list[int] = []
        while (version := await _apply_next(conn, files, now_ms=now_ms)) is not None:
            applied_now.append(version)
        return applied_now
    finally:
        # A lost session released its locks already: keep the original error, not this one.
        with contextlib.suppress(*db.DRIVER_ERRORS):
            await conn.execute("SELECT pg_catalog.pg_advisory_unlock($1)", LOCK_KEY)
