"""An approver group's role (docs/security.md#approval-policies): the NOLOGIN role
`<installation>_g_<group>`, marked as that group's, a member of nothing, whose members may
vote under a policy naming the group. `token create --group` makes it if missing and grants
it to the principal's role; a role of that name the installation did not make is refused,
as `claims` refuses every such role. Names are validated plain identifiers (DDL takes no
parameters)."""

from __future__ import annotations

from qinglong_dispatcher.adapters.installation_roles import Connection, claims
from qinglong_dispatcher.domain import errors, installation

_MEMBERS = """
SELECT p.rolname AS principal_role, g.rolname AS group_role
FROM pg_catalog.pg_auth_members AS m
JOIN pg_catalog.pg_roles AS g ON g.oid = m.roleid
JOIN pg_catalog.pg_roles AS p ON p.oid = m.member
WHERE pg_catalog.starts_with(g.rolname, $1) AND pg_catalog.starts_with(p.rolname, $2)
ORDER BY 1, 2
"""
"""The principals' roles that are members of the groups' roles (by the two prefixes)."""

MAX_ROLE = 63
"""PostgreSQL cuts a longer name short: a group's role must fit whole."""


def role_of(name: str, group: str) -> str:
    """The role of `group` in installation `name`, or `InvalidInput` when it does not fit."""
    role = installation.group_role(name, installation.check_group(group))
    if len(role) > MAX_ROLE:
        raise errors.InvalidInput(
            f"group {group!r}: its role {role} is longer than {MAX_ROLE} characters"
        )
    return role


def refusal(name: str, group: str, found: claims.Existing) -> str | None:
    """Why installation `name` may not take the existing role `found` as `group`'s: not
    marked as that group's, a login, or a member of any role (a group's role grants the
    right to vote and nothing else)."""
    if found.mark != installation.group_mark(name, group):
        return (
            f"role {found.name} exists but installation {name} did not create it "
            "(docs/security.md: roles an installation owns)"
        )
    if found.can_login or found.superuser:
        return f"role {found.name} is a login, not an approver group"
    if found.member_of:
        return (
            f"role {found.name} is a member of {found.member_of[0]}: an approver group's "
            "role holds nothing"
        )
    return None


async def grant(conn: Connection, name: str, principal: str, group: str) -> None:
    """Make `group`'s role of installation `name` if missing (marked), or take the existing
    one if it is that group's; then grant it to `principal`'s role."""
    role = role_of(name, group)
    found = (await claims.existing(conn, [role])).get(role)
    if found is None:
        await conn.execute(claims.create_sql({role: installation.group_mark(name, group)}))
        found = (await claims.existing(conn, [role])).get(role)
    if found is None or (why := refusal(name, group, found)) is not None:
        raise errors.TokenRefused(why or f"role {role} vanished", code="role_foreign")
    await conn.execute(f"GRANT {role} TO {installation.principal_role(name, principal)}")


async def members(conn: Connection, name: str) -> dict[str, list[str]]:
    """Each principal of installation `name` and the approver groups its role is in."""
    groups, principals = installation.group_prefix(name), installation.principal_prefix(name)
    found: dict[str, list[str]] = {}
    for row in await conn.fetch(_MEMBERS, groups, principals):
        principal = str(row["principal_role"]).removeprefix(principals)
        found.setdefault(principal, []).append(str(row["group_role"]).removeprefix(groups))
    return found
