"""Applies and verifies the PostgreSQL migrations: roles, schema, one file per transaction.

`migrate` connects as an administrator (a superuser, or the database owner with CREATEROLE).
It holds a session advisory lock for the whole run, so two `migrate` of one database take
turns; works out the database's installation (`domain/installation.py`: the one whose
migrator owns schema `qinglong`, else the one asked for, else the database's name); creates
that installation's NOLOGIN roles if missing, marked as its own, and refuses any that exist
unless they are its own (`installation_roles.kinds`); creates the schema owned by the
installation's migrator; and runs every file, its template role names made the
installation's, with `SET LOCAL ROLE <migrator>`, so the migrator owns every object it creates.
"""

from __future__ import annotations

import contextlib

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.adapters.installation_roles import kinds
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import driver_errors
from qinglong_dispatcher.domain import errors, installation, schema

SCHEMA = "qinglong"

LOCK_KEY = 0x716C_6D69_6772
"""The advisory lock key of `migrate` ("qlmigr"); advisory locks are per database."""

LOCK_WAIT_MS = 300_000
"""How long a second `migrate` waits for the first before giving up."""

FILE_TIMEOUT_S = 3600.0
"""Client-side bound on one migration file (the pool's default is sized for OLTP statements)."""

_LEDGER = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations (
    version       INTEGER PRIMARY KEY,
    name          TEXT NOT NULL,
    checksum      TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL
);
-- The runtime, operators and approvers read the ledger (every command refuses an unmigrated
-- schema) and need the schema itself; table privileges come with each migration file.
GRANT USAGE ON SCHEMA {SCHEMA} TO qinglong_runtime, qinglong_operator, qinglong_approver;
GRANT SELECT ON {SCHEMA}.schema_migrations
    TO qinglong_runtime, qinglong_operator, qinglong_approver;
"""
"""Written with the template role names, like the migration files, and rendered the same."""

LEDGER_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables "
    "WHERE schemaname = $1 AND tablename = 'schema_migrations')"
)
"""Whether schema `$1` holds the migration ledger (`moving` asks it too)."""

_SCHEMA_OWNER = (
    "SELECT r.rolname FROM pg_catalog.pg_namespace AS n "
    "JOIN pg_catalog.pg_roles AS r ON r.oid = n.nspowner WHERE n.nspname = $1"
)


async def installation_of(conn: db.Connection) -> str | None:
    """The installation whose migrator owns the schema; None before the first `migrate`.

    The schema's owner is the record: it needs no privilege to read, a database cloned from
    a migrated template carries it, and nothing but an administrator can change it."""
    owner = await conn.fetchval(_SCHEMA_OWNER, SCHEMA)
    if owner is None:
        return None
    name = str(owner).removesuffix("_migrator")
    if name == owner or not installation.NAME.fullmatch(name):
        raise errors.StoreError(
            f"schema {SCHEMA} is owned by {owner}, not by an installation's migrator",
            code="schema_foreign",
        )
    return name


async def _choose_installation(conn: db.Connection, requested: str | None) -> tuple[str, bool]:
    """The installation, and whether the database belonged to it already (a name an older
    release gave stays valid; a new installation's name must be unambiguous)."""
    recorded = await installation_of(conn)
    if recorded is not None:
        if requested is not None and requested != recorded:
            raise errors.StoreError(
                f"this database belongs to installation {recorded}, not {requested} "
                "(QINGLONG_INSTALLATION); docs/security.md says how to move it",
                code="installation_mismatch",
            )
        return recorded, True
    if requested is not None:
        return installation.check_new_name(requested), False
    database = str(await conn.fetchval("SELECT current_database()"))
    return installation.check_new_name(installation.from_database_name(database)), False


async def _applied(conn: db.Connection) -> dict[int, str]:
    if not await conn.fetchval(LEDGER_EXISTS, SCHEMA):
        return {}
    rows = await conn.fetch(f"SELECT version, checksum FROM {SCHEMA}.schema_migrations")
    return {int(row["version"]): str(row["checksum"]) for row in rows}


async def state(conn: db.Connection) -> schema.SchemaState:
    """Compare the database with this release's files."""
    return schema.compare(migration_files.load("postgres"), await _applied(conn))


async def _prepare(conn: db.Connection, name: str, *, recorded: bool) -> None:
    migrator = installation.role(name, "migrator")
    # An older release made the roles of a database it migrated (and the legacy ones) unmarked.
    await kinds.claim_roles(conn, name, adopt_unmarked=recorded or name == installation.LEGACY)
    await kinds.become_migrator(conn, name)
    async with conn.transaction():
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA} AUTHORIZATION {migrator}")
        await conn.execute(f"SET LOCAL ROLE {migrator}")
        await conn.execute(installation.render(_LEDGER, name))


async def _apply_next(
    conn: db.Connection, files: tuple[schema.Migration, ...], name: str, *, now_ms: int
) -> int | None:
    """Apply the first pending file in one transaction; None when nothing is pending."""
    async with conn.transaction():
        # DDL may take long on a big table; lock_timeout still bounds waiting on the runtime.
        await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute(f"SET LOCAL ROLE {installation.role(name, 'migrator')}")
        current = schema.compare(files, await _applied(conn))
        if current.tampered or current.unknown:
            current.require_current()
        if not current.pending:
            return None
        migration = current.pending[0]
        await conn.execute(installation.render(migration.sql, name), timeout=FILE_TIMEOUT_S)
        await conn.execute(
            f"INSERT INTO {SCHEMA}.schema_migrations (version, name, checksum, applied_at_ms) "
            "VALUES ($1, $2, $3, $4)",
            migration.version,
            migration.name,
            migration.checksum,
            now_ms,
        )
        return migration.version


async def migrate(
    conn: db.Connection, *, now_ms: int, requested_installation: str | None = None
) -> list[int]:
    """Apply pending migrations in order; refuse a tampered or newer schema. Returns versions.

    `requested_installation` names the installation of a new database (default: the database's
    name); for a migrated one it must be the installation it already belongs to."""
    files = migration_files.load("postgres")
    async with conn.transaction():
        # A session lock outlives this transaction; its wait is bounded here, not by the pool.
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
        await conn.execute(f"SET LOCAL statement_timeout = {LOCK_WAIT_MS}")
        await conn.execute(
            "SELECT pg_catalog.pg_advisory_lock($1)", LOCK_KEY, timeout=LOCK_WAIT_MS / 1000 + 5
        )
    try:
        name, recorded = await _choose_installation(conn, requested_installation)
        try:
            await _prepare(conn, name, recorded=recorded)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) == "42501":
                raise errors.StoreError(
                    "migrate needs an administrator: a superuser, or the database owner with "
                    f"CREATEROLE ({exc.args[0] if exc.args else 'permission denied'})",
                    code="permission_denied",
                ) from exc
            raise
        applied_now: list[int] = []
        while (version := await _apply_next(conn, files, name, now_ms=now_ms)) is not None:
            applied_now.append(version)
        return applied_now
    finally:
        # A lost session released its locks already: keep the original error, not this one.
        with contextlib.suppress(*driver_errors.DRIVER_ERRORS):
            await conn.execute("SELECT pg_catalog.pg_advisory_unlock($1)", LOCK_KEY)
