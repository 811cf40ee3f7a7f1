"""Applies and verifies the PostgreSQL migrations: roles, schema, one file per transaction.

`migrate` connects as an administrator (a superuser, or the database owner with CREATEROLE).
It holds a session advisory lock for the whole run, so two `migrate` of one database take
turns; works out the database's installation (`domain/installation.py`: the one whose
migrator owns schema `qinglong`, else the one asked for, else the database's name); creates
that installation's NOLOGIN roles if missing, marked as its own, and refuses any that exist
unless they are its own (`role_claims.py`; roles are cluster-wide, so two databases of one
server may race to create them: the loser's duplicate is swallowed); creates the schema owned
by the installation's migrator; and runs every file, its template role names made the
installation's, with `SET LOCAL ROLE <migrator>`, so the migrator owns every object it creates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import role_claims
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

_LEDGER_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables "
    "WHERE schemaname = $1 AND tablename = 'schema_migrations')"
)

_SCHEMA_OWNER = (
    "SELECT r.rolname FROM pg_catalog.pg_namespace AS n "
    "JOIN pg_catalog.pg_roles AS r ON r.oid = n.nspowner WHERE n.nspname = $1"
)


async def ensure_roles(conn: db.Connection, marks: Mapping[str, str]) -> None:
    """Create the roles of `marks` if missing, each marked, in a transaction of their own."""
    await conn.execute(role_claims.create_sql(marks))


async def claim_roles(conn: db.Connection, name: str, *, adopt_unmarked: bool) -> None:
    """Make installation `name`'s roles, or take those that exist if they are its own.

    Looks before creating anything (a refusal leaves the server as it was), creates the
    missing ones marked, then looks again: another session may have created one in between.
    An unmarked role that may be adopted (`role_claims.kind_role_refusal`) is marked now."""
    kinds = dict(zip(installation.roles(name), installation.KINDS, strict=True))
    for attempt in ("before", "after"):
        found = await role_claims.existing(conn, kinds)
        for role, existing in found.items():
            refusal = role_claims.kind_role_refusal(
                name, kinds[role], existing, adopt_unmarked=adopt_unmarked
            )
            if refusal is not None:
                raise errors.StoreError(refusal, code="role_foreign")
        if attempt == "before":
            missing = {
                r: installation.role_mark(name, k) for r, k in kinds.items() if r not in found
            }
            if missing:
                await ensure_roles(conn, missing)
    for role, existing in found.items():
        if existing.mark is None:
            await conn.execute(
                role_claims.comment_sql(role, installation.role_mark(name, kinds[role]))
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
    if not await conn.fetchval(_LEDGER_EXISTS, SCHEMA):
        return {}
    rows = await conn.fetch(f"SELECT version, checksum FROM {SCHEMA}.schema_migrations")
    return {int(row["version"]): str(row["checksum"]) for row in rows}


async def state(conn: db.Connection) -> schema.SchemaState:
    """Compare the database with this release's files."""
    return schema.compare(migration_files.load("postgres"), await _applied(conn))


async def _become_migrator(conn: db.Connection, name: str) -> None:
    """Let a non-superuser administrator act as the migrator (a superuser already may)."""
    migrator = installation.role(name, "migrator")
    recorder = installation.role(name, "recorder")
    allowed = await conn.fetchval(
        "SELECT rolsuper OR pg_catalog.pg_has_role(current_user, $1, 'MEMBER') "
        "FROM pg_catalog.pg_roles WHERE rolname = current_user",
        migrator,
    )
    if not allowed:
        await conn.execute(f"GRANT {migrator} TO CURRENT_USER")
    # Handing a function to the recorder needs membership in it; nothing else is a member.
    granted = await conn.fetchval(
        "SELECT pg_catalog.pg_has_role($1, $2, 'MEMBER')", migrator, recorder
    )
    if not granted:
        await conn.execute(f"GRANT {recorder} TO {migrator}")


async def _prepare(conn: db.Connection, name: str, *, recorded: bool) -> None:
    migrator = installation.role(name, "migrator")
    # An older release made the roles of a database it migrated (and the legacy ones) unmarked.
    await claim_roles(conn, name, adopt_unmarked=recorded or name == installation.LEGACY)
    await _become_migrator(conn, name)
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
        with contextlib.suppress(*db.DRIVER_ERRORS):
            await conn.execute("SELECT pg_catalog.pg_advisory_unlock($1)", LOCK_KEY)


# -- moving a database to an installation of its own -----------------------------------------

_ACL_ENTRIES = """
SELECT 'SCHEMA' AS kind, pg_catalog.quote_ident(n.nspname) AS object, NULL AS column_name,
       a.privilege_type, g.rolname AS grantee
FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
JOIN pg_catalog.pg_roles AS g ON g.oid = a.grantee
WHERE n.nspname = $1 AND g.rolname = ANY($2::text[])
UNION ALL
SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.oid::pg_catalog.regclass::text,
       NULL, a.privilege_type, g.rolname
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
     pg_catalog.aclexplode(c.relacl) AS a
JOIN pg_catalog.pg_roles AS g ON g.oid = a.grantee
WHERE n.nspname = $1 AND g.rolname = ANY($2::text[])
UNION ALL
SELECT 'TABLE', c.oid::pg_catalog.regclass::text, pg_catalog.quote_ident(t.attname),
       a.privilege_type, g.rolname
FROM pg_catalog.pg_attribute AS t
JOIN pg_catalog.pg_class AS c ON c.oid = t.attrelid
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace,
     pg_catalog.aclexplode(t.attacl) AS a
JOIN pg_catalog.pg_roles AS g ON g.oid = a.grantee
WHERE n.nspname = $1 AND g.rolname = ANY($2::text[])
UNION ALL
SELECT 'FUNCTION', p.oid::pg_catalog.regprocedure::text, NULL, a.privilege_type, g.rolname
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace,
     pg_catalog.aclexplode(p.proacl) AS a
JOIN pg_catalog.pg_roles AS g ON g.oid = a.grantee
WHERE n.nspname = $1 AND g.rolname = ANY($2::text[])
"""
"""Every privilege a role of `$2` holds on schema `$1` and on what is in it."""

_NAMING_FUNCTIONS = """
SELECT pg_catalog.pg_get_functiondef(p.oid) AS definition
FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND p.prosrc ~ $2
"""

_MEMBERS = """
SELECT DISTINCT m.rolname FROM pg_catalog.pg_auth_members AS am
JOIN pg_catalog.pg_roles AS r ON r.oid = am.roleid
JOIN pg_catalog.pg_roles AS m ON m.oid = am.member
WHERE r.rolname = ANY($1::text[]) AND NOT m.rolname = ANY($1::text[])
ORDER BY m.rolname
"""


def _privilege(verb: str, entry: Mapping[str, Any], role: str) -> str:
    """`GRANT … TO role` or `REVOKE … FROM role` of one ACL entry of `_ACL_ENTRIES`."""
    columns = f" ({entry['column_name']})" if entry["column_name"] else ""
    target = "TO" if verb == "GRANT" else "FROM"
    return (
        f"{verb} {entry['privilege_type']}{columns} ON {entry['kind']} {entry['object']} "
        f"{target} {role}"
    )


_SHARED_OWNED = """
SELECT (SELECT count(*) FROM pg_catalog.pg_database WHERE datdba = r.oid)
     + (SELECT count(*) FROM pg_catalog.pg_tablespace WHERE spcowner = r.oid)
FROM pg_catalog.pg_roles AS r WHERE r.rolname = $1
"""
"""Databases and tablespaces a role owns: `REASSIGN OWNED` would hand those over too."""


async def move_installation(conn: db.Connection, *, to: str) -> tuple[str, list[str]]:
    """Give a migrated database the roles of installation `to`, in one transaction.

    For a database of the legacy installation whose `qinglong_*` roles other databases of the
    server share. Each privilege a role of the old installation holds here is granted to the
    new one's role of the same kind and then revoked (`DROP OWNED BY`, which acts on this
    database only); the old migrator's and recorder's objects pass to the new ones; and the
    functions that name a role by name are re-created naming the new one. Logins are left to
    the administrator (roles are server-wide: only they know which login is for which
    database). Returns the old installation and the logins that were members of its roles."""
    installation.check_new_name(to)
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
        await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", LOCK_KEY)
        current = await installation_of(conn)
        if current is None or not await conn.fetchval(_LEDGER_EXISTS, SCHEMA):
            raise errors.SchemaNotMigrated("migrate the database before moving it")
        if current == to:
            return current, []
    await claim_roles(conn, to, adopt_unmarked=to == installation.LEGACY)
    await _become_migrator(conn, to)
    old_roles = installation.roles(current)
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}")
        await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", LOCK_KEY)
        renamed = dict(zip(old_roles, installation.roles(to), strict=True))
        entries = await conn.fetch(_ACL_ENTRIES, SCHEMA, list(old_roles))
        for entry in entries:
            await conn.execute(_privilege("GRANT", entry, renamed[entry["grantee"]]))
        for kind in ("migrator", "recorder"):
            owner = installation.role(current, kind)
            if await conn.fetchval(_SHARED_OWNED, owner):
                raise errors.StoreError(
                    f"{owner} owns a database or tablespace: hand it to another role first",
                    code="installation_shared",
                )
            # REASSIGN acts on this database's objects (and the shared ones, refused above).
            await conn.execute(f"REASSIGN OWNED BY {owner} TO {installation.role(to, kind)}")
        pattern = rf"\m{current}_({'|'.join(installation.KINDS)})\M"
        for row in await conn.fetch(_NAMING_FUNCTIONS, SCHEMA, pattern):
            await conn.execute(installation.render(str(row["definition"]), to, source=current))
        for entry in entries:
            await conn.execute(_privilege("REVOKE", entry, entry["grantee"]))
        members = [str(r["rolname"]) for r in await conn.fetch(_MEMBERS, list(old_roles))]
    return current, members
