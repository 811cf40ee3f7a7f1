"""`migrate --move-to`: a migrated database given the roles of another installation.

Not a store operation: the dialect runs it on an administrator's session of a pool of one,
under `migrate`'s advisory lock, so it never overlaps a `migrate` of the same database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qinglong_dispatcher.adapters.installation_roles import kinds
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import migrations
from qinglong_dispatcher.domain import errors, installation

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
        await conn.execute(f"SET LOCAL lock_timeout = {migrations.LOCK_WAIT_MS}")
        await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", migrations.LOCK_KEY)
        current = await migrations.installation_of(conn)
        if current is None or not await conn.fetchval(migrations.LEDGER_EXISTS, migrations.SCHEMA):
            raise errors.SchemaNotMigrated("migrate the database before moving it")
        if current == to:
            return current, []
    await kinds.claim_roles(conn, to, adopt_unmarked=to == installation.LEGACY)
    await kinds.become_migrator(conn, to)
    old_roles = installation.roles(current)
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {migrations.LOCK_WAIT_MS}")
        await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", migrations.LOCK_KEY)
        renamed = dict(zip(old_roles, installation.roles(to), strict=True))
        entries = await conn.fetch(_ACL_ENTRIES, migrations.SCHEMA, list(old_roles))
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
        for row in await conn.fetch(_NAMING_FUNCTIONS, migrations.SCHEMA, pattern):
            await conn.execute(installation.render(str(row["definition"]), to, source=current))
        for entry in entries:
            await conn.execute(_privilege("REVOKE", entry, entry["grantee"]))
        members = [str(r["rolname"]) for r in await conn.fetch(_MEMBERS, list(old_roles))]
    return current, members
