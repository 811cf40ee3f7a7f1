"""PostgreSQL's half of the reference schema: schema `qinglong` read from the catalogs.

Catalog queries rather than `pg_dump`, whose text varies by version and which not every
machine has; names come schema-qualified because the reading session's search_path is
`pg_catalog` alone. Role names are shown as the legacy installation's (`qinglong_runtime`),
so the text does not depend on the installation a run made for itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from qinglong_dispatcher.domain import installation

ADMINISTRATOR = "<administrator>"
"""What the login that ran `migrate` (the server's superuser, named per server) is shown as."""

SCHEMA = "qinglong"

_ROLES = """
SELECT r.rolname, r.rolinherit, r.rolcanlogin
FROM pg_catalog.pg_roles AS r WHERE r.rolname = ANY($1::text[]) ORDER BY r.rolname"""

_MEMBERSHIPS = """
SELECT g.rolname AS granted, m.rolname AS member, a.admin_option
FROM pg_catalog.pg_auth_members AS a
JOIN pg_catalog.pg_roles AS g ON g.oid = a.roleid
JOIN pg_catalog.pg_roles AS m ON m.oid = a.member
WHERE g.rolname = ANY($1::text[]) AND m.rolname = ANY($1::text[])
ORDER BY g.rolname, m.rolname"""

_SCHEMA = """
SELECT pg_catalog.pg_get_userbyid(n.nspowner) AS owner, n.oid
FROM pg_catalog.pg_namespace AS n WHERE n.nspname = $1"""

_RELATIONS = """
SELECT c.oid, c.relname, c.relkind::text AS relkind,
       pg_catalog.pg_get_userbyid(c.relowner) AS owner, c.relrowsecurity, c.relforcerowsecurity
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = $1 AND c.relkind IN ('r', 'S')
ORDER BY c.relname"""

_COLUMNS = """
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       pg_catalog.pg_get_expr(d.adbin, d.adrelid) AS default_expr,
       a.attidentity::text AS attidentity, a.attgenerated::text AS attgenerated
FROM pg_catalog.pg_attribute AS a
LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum"""

_CONSTRAINTS = """
SELECT c.conname, pg_catalog.pg_get_constraintdef(c.oid) AS definition
FROM pg_catalog.pg_constraint AS c WHERE c.conrelid = $1 ORDER BY c.conname"""

_SEQUENCE = """
SELECT pg_catalog.format_type(s.seqtypid, NULL) AS type, s.seqstart, s.seqincrement,
       s.seqmin, s.seqmax, s.seqcache, s.seqcycle,
       (SELECT d.refobjid::pg_catalog.regclass::text || '.' || pg_catalog.quote_ident(t.attname)
        FROM pg_catalog.pg_depend AS d
        JOIN pg_catalog.pg_attribute AS t ON t.attrelid = d.refobjid AND t.attnum = d.refobjsubid
        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = s.seqrelid
          AND d.deptype IN ('a', 'i')) AS owned_by
FROM pg_catalog.pg_sequence AS s WHERE s.seqrelid = $1"""

_INDEXES = """
SELECT c.relname AS table_name, i.relname AS index_name,
       pg_catalog.pg_get_indexdef(x.indexrelid) AS definition
FROM pg_catalog.pg_index AS x
JOIN pg_catalog.pg_class AS i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class AS c ON c.oid = x.indrelid
WHERE c.relnamespace = $1 ORDER BY c.relname, i.relname"""

_FUNCTIONS = """
SELECT p.oid, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid) AS arguments,
       pg_catalog.pg_get_userbyid(p.proowner) AS owner,
       pg_catalog.pg_get_functiondef(p.oid) AS definition
FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = $1
ORDER BY p.proname, arguments"""

_TRIGGERS = """
SELECT c.relname AS table_name, t.tgname, t.tgenabled::text AS tgenabled,
       pg_catalog.pg_get_triggerdef(t.oid) AS definition
FROM pg_catalog.pg_trigger AS t JOIN pg_catalog.pg_class AS c ON c.oid = t.tgrelid
WHERE c.relnamespace = $1 AND NOT t.tgisinternal ORDER BY c.relname, t.tgname"""

_ACL = """
SELECT a.grantee, a.privilege_type, a.is_grantable
FROM {catalog} AS o,
     pg_catalog.aclexplode(COALESCE(o.{acl}, pg_catalog.acldefault({kind}, o.{owner}))) AS a
WHERE o.oid = $1"""
"""The privileges an object's ACL grants (no ACL yet: its default, the owner's and PUBLIC's)."""

_SCHEMA_ACL = _ACL.format(
    catalog="pg_catalog.pg_namespace", acl="nspacl", kind="'n'", owner="nspowner"
)
_RELATION_ACL = _ACL.format(
    catalog="pg_catalog.pg_class",
    acl="relacl",
    kind="CASE o.relkind WHEN 'S' THEN 's' ELSE 'r' END::\"char\"",
    owner="relowner",
)
_FUNCTION_ACL = _ACL.format(
    catalog="pg_catalog.pg_proc", acl="proacl", kind="'f'", owner="proowner"
)
_COLUMN_ACL = """
SELECT t.attname, a.grantee, a.privilege_type, a.is_grantable
FROM pg_catalog.pg_attribute AS t, pg_catalog.aclexplode(t.attacl) AS a
WHERE t.attrelid = $1 AND t.attnum > 0 AND NOT t.attisdropped AND t.attacl IS NOT NULL
ORDER BY t.attnum"""


_UNRENDERED = """
SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' of kind ' || c.relkind::text
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = $1 AND c.relkind NOT IN ('r', 'S', 'i')
UNION ALL
SELECT 'rule ' || r.rulename FROM pg_catalog.pg_rewrite AS r
JOIN pg_catalog.pg_class AS c ON c.oid = r.ev_class WHERE c.relnamespace = $1
UNION ALL
SELECT 'policy ' || p.polname FROM pg_catalog.pg_policy AS p
JOIN pg_catalog.pg_class AS c ON c.oid = p.polrelid WHERE c.relnamespace = $1
UNION ALL
SELECT 'type ' || t.typname FROM pg_catalog.pg_type AS t
WHERE t.typnamespace = $1 AND t.typtype IN ('d', 'e', 'r', 'm')
UNION ALL
SELECT 'function ' || p.proname || ' of kind ' || p.prokind::text FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = $1 AND p.prokind <> 'f'
UNION ALL
SELECT 'event trigger ' || e.evtname FROM pg_catalog.pg_event_trigger AS e
UNION ALL
SELECT 'extension ' || x.extname FROM pg_catalog.pg_extension AS x WHERE x.extname <> 'plpgsql'
UNION ALL
SELECT 'default privileges of ' || pg_catalog.pg_get_userbyid(d.defaclrole)
FROM pg_catalog.pg_default_acl AS d
UNION ALL
SELECT 'schema ' || n.nspname FROM pg_catalog.pg_namespace AS n
WHERE n.oid <> $1 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'public')
  AND n.nspname NOT LIKE 'pg\\_%'
UNION ALL
SELECT 'relation ' || c.oid::pg_catalog.regclass::text FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = 'public'::pg_catalog.regnamespace
UNION ALL
SELECT 'function ' || p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = 'public'::pg_catalog.regnamespace"""
"""What a migration could make that `describe` does not show: it refuses rather than omit."""


class _Roles:
    """Role names as the reference shows them: the installation's as the legacy
    installation's (`qinglong_runtime`), the administrator as `ADMINISTRATOR`."""

    def __init__(self, conn: Any, name: str, administrator: str) -> None:
        self._conn = conn
        self.name = name
        self._administrator = administrator
        self._by_oid: dict[int, str] = {}

    async def load(self) -> None:
        rows = await self._conn.fetch("SELECT oid, rolname FROM pg_catalog.pg_roles")
        self._by_oid = {int(row["oid"]): str(row["rolname"]) for row in rows}

    def show(self, role: str) -> str:
        if role == self._administrator:
            return ADMINISTRATOR
        return self.text(role)

    def show_oid(self, oid: int) -> str:
        return "PUBLIC" if oid == 0 else self.show(self._by_oid[oid])

    def text(self, text: str) -> str:
        """`text` with the installation's name made the legacy one (the name is unique)."""
        return text.replace(self.name, installation.LEGACY)


def _grants(roles: _Roles, rows: Iterable[Any], on: str, owner: str) -> list[str]:
    """GRANT lines of `rows` (the owner's own privileges left out: they come with owning)."""
    by_grantee: dict[tuple[str, bool], list[str]] = {}
    for row in rows:
        grantee = roles.show_oid(int(row["grantee"]))
        if grantee == owner:
            continue
        by_grantee.setdefault((grantee, bool(row["is_grantable"])), []).append(
            str(row["privilege_type"])
        )
    return [
        f"GRANT {', '.join(sorted(privileges))} ON {on} TO {grantee}"
        f"{' WITH GRANT OPTION' if grantable else ''};"
        for (grantee, grantable), privileges in sorted(by_grantee.items())
    ]


async def _table(conn: Any, roles: _Roles, relation: Any, schema_owner: str) -> str:
    qualified = f"{SCHEMA}.{relation['relname']}"
    lines: list[str] = []
    for column in await conn.fetch(_COLUMNS, relation["oid"]):
        text = f"    {column['attname']} {column['type']}"
        if column["attidentity"]:
            always = "ALWAYS" if column["attidentity"] == "a" else "BY DEFAULT"
            text += f" GENERATED {always} AS IDENTITY"
        elif column["attgenerated"]:
            text += f" GENERATED ALWAYS AS ({column['default_expr']}) STORED"
        elif column["default_expr"] is not None:
            text += f" DEFAULT {column['default_expr']}"
        if column["attnotnull"]:
            text += " NOT NULL"
        lines.append(text)
    for constraint in await conn.fetch(_CONSTRAINTS, relation["oid"]):
        lines.append(f"    CONSTRAINT {constraint['conname']} {constraint['definition']}")
    out = [
        f"-- table {relation['relname']}",
        f"CREATE TABLE {qualified} (\n" + ",\n".join(lines) + "\n);",
    ]
    if relation["relrowsecurity"]:
        out.append(f"ALTER TABLE {qualified} ENABLE ROW LEVEL SECURITY;")
    if relation["relforcerowsecurity"]:
        out.append(f"ALTER TABLE {qualified} FORCE ROW LEVEL SECURITY;")
    out.extend(await _relation_tail(conn, roles, relation, "TABLE", schema_owner))
    return "\n".join(out) + "\n"


async def _relation_tail(
    conn: Any, roles: _Roles, relation: Any, kind: str, schema_owner: str
) -> list[str]:
    """The owner when it is not the schema's, then the relation's and its columns' grants."""
    qualified = f"{SCHEMA}.{relation['relname']}"
    owner = roles.show(str(relation["owner"]))
    out = [] if owner == schema_owner else [f"ALTER {kind} {qualified} OWNER TO {owner};"]
    out.extend(
        _grants(
            roles, await conn.fetch(_RELATION_ACL, relation["oid"]), f"{kind} {qualified}", owner
        )
    )
    by_column: dict[tuple[str, str, bool], list[str]] = {}
    for row in await conn.fetch(_COLUMN_ACL, relation["oid"]):
        key = (
            str(row["privilege_type"]),
            roles.show_oid(int(row["grantee"])),
            bool(row["is_grantable"]),
        )
        by_column.setdefault(key, []).append(str(row["attname"]))
    for (privilege, grantee, grantable), columns in sorted(by_column.items()):
        out.append(
            f"GRANT {privilege} ({', '.join(columns)}) ON TABLE {qualified} TO {grantee}"
            f"{' WITH GRANT OPTION' if grantable else ''};"
        )
    return out


async def _sequence(conn: Any, roles: _Roles, relation: Any, schema_owner: str) -> str:
    row = await conn.fetchrow(_SEQUENCE, relation["oid"])
    qualified = f"{SCHEMA}.{relation['relname']}"
    owned_by = f" OWNED BY {row['owned_by']}" if row["owned_by"] else ""
    text = (
        f"CREATE SEQUENCE {qualified} AS {row['type']} START {row['seqstart']} "
        f"INCREMENT {row['seqincrement']} MINVALUE {row['seqmin']} MAXVALUE {row['seqmax']} "
        f"CACHE {row['seqcache']}{' CYCLE' if row['seqcycle'] else ''}{owned_by};"
    )
    tail = await _relation_tail(conn, roles, relation, "SEQUENCE", schema_owner)
    return "\n".join([text, *tail]) + "\n"


async def describe(conn: Any, name: str, administrator: str) -> str:
    """The reference text of schema `qinglong`, migrated for installation `name` by
    `administrator`, read on `conn` (whose search_path must be `pg_catalog`)."""
    roles = _Roles(conn, name, administrator)
    await roles.load()
    schema = await conn.fetchrow(_SCHEMA, SCHEMA)
    if schema is None:
        raise RuntimeError(f"schema {SCHEMA} is missing: the migration did not run")
    owner = roles.show(str(schema["owner"]))
    namespace = schema["oid"]
    unrendered = [str(row[0]) for row in await conn.fetch(_UNRENDERED, namespace)]
    if unrendered:
        raise RuntimeError(f"the reference schema does not show {', '.join(unrendered)}")
    parts = [
        f"-- Every object of schema {SCHEMA} is owned by its owner, {owner}, unless an\n"
        "-- OWNER TO line says otherwise; an owner's own privileges are not listed.\n"
        f"-- {ADMINISTRATOR} is the login that ran `migrate`. Roles of another installation\n"
        f"-- are named after it instead of `{installation.LEGACY}`.\n",
        await _roles_section(conn, roles),
        await _schema_section(conn, roles, namespace, owner),
        *await _relations_section(conn, roles, namespace, owner),
        await _indexes_section(conn, namespace),
        await _functions_section(conn, roles, namespace, owner),
        await _triggers_section(conn, namespace),
    ]
    return "\n".join(parts)


async def _roles_section(conn: Any, roles: _Roles) -> str:
    kind_roles = list(installation.roles(roles.name))
    lines = ["-- roles (server-wide; made by `migrate`, not by a file)"]
    for row in await conn.fetch(_ROLES, kind_roles):
        login = "LOGIN" if row["rolcanlogin"] else "NOLOGIN"
        inherit = "INHERIT" if row["rolinherit"] else "NOINHERIT"
        lines.append(f"CREATE ROLE {roles.show(row['rolname'])} {login} {inherit};")
    for row in await conn.fetch(_MEMBERSHIPS, kind_roles):
        admin = " WITH ADMIN OPTION" if row["admin_option"] else ""
        lines.append(f"GRANT {roles.show(row['granted'])} TO {roles.show(row['member'])}{admin};")
    return "\n".join(lines) + "\n"


async def _schema_section(conn: Any, roles: _Roles, namespace: int, owner: str) -> str:
    lines = [f"-- schema\nCREATE SCHEMA {SCHEMA} AUTHORIZATION {owner};"]
    lines.extend(
        _grants(roles, await conn.fetch(_SCHEMA_ACL, namespace), f"SCHEMA {SCHEMA}", owner)
    )
    return "\n".join(lines) + "\n"


_RELATION_KINDS = (("r", "tables"), ("S", "sequences"))


async def _relations_section(conn: Any, roles: _Roles, namespace: int, owner: str) -> list[str]:
    relations = await conn.fetch(_RELATIONS, namespace)
    parts: list[str] = []
    for kind, title in _RELATION_KINDS:
        chosen = [r for r in relations if r["relkind"] == kind]
        if chosen:
            parts.append(f"-- {title} ({len(chosen)})\n")
        for relation in chosen:
            show = _table if kind == "r" else _sequence
            parts.append(await show(conn, roles, relation, owner))
    return parts


async def _indexes_section(conn: Any, namespace: int) -> str:
    indexes = await conn.fetch(_INDEXES, namespace)
    return (
        f"-- indexes ({len(indexes)}; those of primary keys and UNIQUE constraints too)\n"
        + "".join(f"{row['definition']};\n" for row in indexes)
    )


async def _functions_section(conn: Any, roles: _Roles, namespace: int, schema_owner: str) -> str:
    functions = await conn.fetch(_FUNCTIONS, namespace)
    parts = [f"-- functions ({len(functions)})\n"]
    for function in functions:
        signature = f"{SCHEMA}.{function['proname']}({function['arguments']})"
        owner = roles.show(str(function["owner"]))
        lines = [f"-- function {signature}", roles.text(function["definition"].rstrip()) + ";"]
        if owner != schema_owner:
            lines.append(f"ALTER FUNCTION {signature} OWNER TO {owner};")
        acl = await conn.fetch(_FUNCTION_ACL, function["oid"])
        lines.extend(_grants(roles, acl, f"FUNCTION {signature}", owner))
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


_ENABLED = {"D": "DISABLE", "R": "ENABLE REPLICA", "A": "ENABLE ALWAYS"}


async def _triggers_section(conn: Any, namespace: int) -> str:
    triggers = await conn.fetch(_TRIGGERS, namespace)
    lines = [f"-- triggers ({len(triggers)})"]
    for row in triggers:
        lines.append(f"{row['definition']};")
        if row["tgenabled"] in _ENABLED:
            lines.append(
                f"ALTER TABLE {SCHEMA}.{row['table_name']} {_ENABLED[row['tgenabled']]} "
                f"TRIGGER {row['tgname']};"
            )
    return "\n".join(lines) + "\n"
