"""Which existing roles an installation may take as its own: those it made, and no others.

Roles are server-wide and their names are derived from an installation's name, so a name
alone says nothing about who made a role: another installation's command, an administrator,
or another product. `migrate` and `token create` therefore mark each role they create with a
`COMMENT ON ROLE` naming the installation and the kind or principal (readable from every
database of the server, changeable only by an administrator), read the mark of each role that
already exists before they grant anything to it or through it, and refuse a role marked for
anyone else, a login, or one that is a member of a role they did not grant. A role an older
release made carries no mark: it is taken (and marked) only where the evidence says it is the
installation's own (`kind_role_refusal`, `principal_role_refusal`); docs/security.md lists the
cases.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from qinglong_dispatcher.adapters.installation_roles import Connection
from qinglong_dispatcher.domain import installation

_EXISTING = """
SELECT r.rolname, r.rolcanlogin, r.rolsuper,
       pg_catalog.shobj_description(r.oid, 'pg_authid') AS mark,
       ARRAY(SELECT g.rolname FROM pg_catalog.pg_auth_members AS m
             JOIN pg_catalog.pg_roles AS g ON g.oid = m.roleid
             WHERE m.member = r.oid ORDER BY 1) AS member_of,
       ARRAY(SELECT u.rolname FROM pg_catalog.pg_auth_members AS m
             JOIN pg_catalog.pg_roles AS u ON u.oid = m.member
             WHERE m.roleid = r.oid AND NOT (u.rolsuper OR u.rolcreaterole)
             ORDER BY 1) AS members
FROM pg_catalog.pg_roles AS r WHERE r.rolname = ANY($1::text[])
"""
"""Each named role that exists, its mark and its memberships both ways. Members that are
administrators are left out: they may grant themselves any such role anyway (`migrate`
makes its administrator a member of the migrator, PostgreSQL 16 its creator)."""

_ROLE = re.compile(r"[a-z][a-z0-9_]{0,62}")
_MARK = re.compile(r"[a-z0-9_:. -]+")

_PREDEFINED = "pg_"
"""The prefix PostgreSQL reserves for its predefined roles."""

_ROLE_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Existing:
    """A role that exists, as the catalog describes it."""

    name: str
    can_login: bool
    superuser: bool
    mark: str | None
    member_of: tuple[str, ...]
    members: tuple[str, ...]


async def existing(conn: Connection, names: Iterable[str]) -> dict[str, Existing]:
    """The roles of `names` that exist, by name."""
    rows = await conn.fetch(_EXISTING, list(names))
    return {
        str(row["rolname"]): Existing(
            name=str(row["rolname"]),
            can_login=bool(row["rolcanlogin"]),
            superuser=bool(row["rolsuper"]),
            mark=None if row["mark"] is None else str(row["mark"]),
            member_of=tuple(str(g) for g in row["member_of"]),
            members=tuple(str(m) for m in row["members"]),
        )
        for row in rows
    }


def comment_sql(role: str, mark: str) -> str:
    """`COMMENT ON ROLE` putting `mark` on `role` (both checked: DDL takes no parameters)."""
    if not _ROLE.fullmatch(role):
        raise ValueError(f"not a plain role name: {role!r}")
    if not mark.startswith(installation.MARK) or not _MARK.fullmatch(mark):
        raise ValueError(f"not a mark: {mark!r}")
    return f"COMMENT ON ROLE {role} IS '{mark}'"


def kind_role_refusal(name: str, kind: str, role: Existing, *, adopt_unmarked: bool) -> str | None:
    """Why `migrate` of installation `name` may not take `role` as its role of `kind`.

    Marked as that role: taken. Unmarked: taken only if `adopt_unmarked` (the database
    already belongs to `name`, whose older `migrate` made its roles unmarked, or `name` is the
    legacy installation, whose `qinglong_*` roles many databases share) and it is no login.
    Either way it must be a member of no role but the installation's own (the migrator is the
    recorder's member, the API's role its principals'; nothing else is granted between roles)
    and PostgreSQL's predefined ones (an administrator may give the runtime
    `pg_read_all_stats`; no installation's role can be named `pg_…`)."""
    unmarked = role.mark is None and adopt_unmarked
    if role.mark != installation.role_mark(name, kind) and not unmarked:
        return (
            f"role {role.name} exists but migrate of installation {name} did not create it "
            "(docs/security.md: roles an installation owns)"
        )
    if role.can_login or role.superuser:
        return f"role {role.name} is a login, not a role of installation {name}"
    own = set(installation.roles(name))
    # `token create` grants each principal's role to the API's role.
    granted = (_PREDEFINED, installation.principal_prefix(name)) if kind == "api" else _PREDEFINED
    foreign = [g for g in role.member_of if g not in own and not g.startswith(granted)]
    if foreign:
        return (
            f"role {role.name} is a member of {foreign[0]}, which installation {name} "
            "did not grant (docs/security.md: roles an installation owns)"
        )
    return None


async def principal_role_refusal(
    conn: Connection, name: str, principal: str, role: Existing, *, had_tokens: bool
) -> str | None:
    """Why `token create` of installation `name` may not take `role` as `principal`'s.

    Marked as that principal's: taken. Unmarked (an older `token create` made it): taken only
    if this database holds a token of the principal already and the role is not named like
    another installation's role of some kind (`<other>_<kind>` while `<other>_migrator`
    exists). Either way it is no login, a member of the installation's principal kinds, the
    roles an administrator may add (`ADMINISTRATOR_GRANTS`) and the installation's approver
    groups' roles only, and nobody's but the installation's API role's."""
    if role.can_login or role.superuser:
        return f"role {role.name} is a login, not a principal"
    ours = role.mark == installation.principal_mark(name, principal)
    older = role.mark is None and had_tokens and not await _named_like_a_kind(conn, role.name)
    if not (ours or older):
        return (
            f"role {role.name} exists but token create of installation {name} did not "
            "create it (docs/security.md: roles an installation owns)"
        )
    allowed = installation.PRINCIPAL_KINDS + installation.ADMINISTRATOR_GRANTS
    kinds = {installation.role(name, kind) for kind in allowed}
    api = installation.role(name, "api")
    # `token create --group` grants it the installation's approver groups' roles.
    groups = installation.group_prefix(name)
    foreign = [g for g in role.member_of if g not in kinds and not g.startswith(groups)]
    foreign += [m for m in role.members if m != api]
    if foreign:
        return (
            f"role {role.name} has a membership with {foreign[0]} that installation {name} "
            "did not grant (docs/security.md: roles an installation owns)"
        )
    return None


async def _named_like_a_kind(conn: Connection, role: str) -> bool:
    for kind in installation.KINDS:
        other = role.removesuffix(f"_{kind}")
        if other != role and await conn.fetchval(_ROLE_EXISTS, f"{other}_migrator"):
            return True
    return False


def create_sql(marks: Mapping[str, str]) -> str:
    """One DO block creating each NOLOGIN role unless it exists, and marking each it creates
    in the same transaction (so no other session sees it unmarked); a concurrent creator
    wins and keeps its own mark, which the caller then reads."""
    steps = "\n".join(
        f"""    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{role}') THEN
        BEGIN
            CREATE ROLE {role} NOLOGIN{_attributes(role)};
            {comment_sql(role, mark)};
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database of this server created it at the same moment
        END;
    END IF;"""
        for role, mark in marks.items()
    )
    return f"DO $roles$\nBEGIN\n{steps}\nEND\n$roles$"


def _attributes(role: str) -> str:
    """` NOINHERIT` for the API's role (its members only ever SET ROLE to a principal)."""
    kind = next((k for k in installation.NOINHERIT_KINDS if role.endswith(f"_{k}")), None)
    return " NOINHERIT" if kind is not None else ""
