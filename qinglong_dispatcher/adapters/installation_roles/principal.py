"""A principal's role (the authenticator pattern, `postgres/principals.py`): the NOLOGIN role
`<installation>_p_<name>`, marked as that principal's and never one the installation did not
make (`claims`), a member of exactly the kind role of its tokens and granted to the API's
role while the principal holds a live token. Role names are validated plain identifiers
(DDL takes no parameters), never taken from a request."""

from __future__ import annotations

from qinglong_dispatcher.adapters.installation_roles import Connection, claims
from qinglong_dispatcher.domain import errors, installation

_MEMBER = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members AS m "
    "JOIN pg_catalog.pg_roles AS r ON r.oid = m.roleid "
    "JOIN pg_catalog.pg_roles AS g ON g.oid = m.member "
    "WHERE r.rolname = $1 AND g.rolname = $2)"
)


async def take(conn: Connection, name: str, principal: str, *, had_tokens: bool) -> None:
    """Create `principal`'s role of installation `name` marked, or take the existing one if it
    is the principal's (`claims.principal_role_refusal`; an unmarked one is marked now)."""
    role = installation.principal_role(name, principal)
    mark = installation.principal_mark(name, principal)
    found = (await claims.existing(conn, [role])).get(role)
    if found is None:
        await conn.execute(f"CREATE ROLE {role} NOLOGIN")
        await conn.execute(claims.comment_sql(role, mark))
        return
    refusal = await claims.principal_role_refusal(
        conn, name, principal, found, had_tokens=had_tokens
    )
    if refusal is not None:
        raise errors.TokenRefused(refusal, code="role_foreign")
    if found.mark is None:  # an older release's `token create` made it
        await conn.execute(claims.comment_sql(role, mark))


async def grant(conn: Connection, name: str, principal: str, kind: str) -> None:
    """Make the principal's role a member of the kind role `kind` only, granted to the API's."""
    role = installation.principal_role(name, principal)
    for other in installation.PRINCIPAL_KINDS:
        kind_role = installation.role(name, other)
        if other != kind and await conn.fetchval(_MEMBER, kind_role, role):
            await conn.execute(f"REVOKE {kind_role} FROM {role}")
    await conn.execute(f"GRANT {installation.role(name, kind)} TO {role}")
    await conn.execute(f"GRANT {role} TO {installation.role(name, 'api')}")


async def release(conn: Connection, name: str, principal: str) -> None:
    """Take the principal's role from the API's role (it holds no live token any more)."""
    role = installation.principal_role(name, principal)
    api = installation.role(name, "api")
    if await conn.fetchval(_MEMBER, role, api):
        await conn.execute(f"REVOKE {role} FROM {api}")
