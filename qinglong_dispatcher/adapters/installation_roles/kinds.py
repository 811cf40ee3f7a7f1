"""An installation's kind roles (`domain/installation.py`): made marked if missing, taken only
if they are its own (`claims`), and the administrator running `migrate` made able to act as
the migrator. Roles are cluster-wide, so two databases of one server may race to create them:
the loser's duplicate is swallowed."""

from __future__ import annotations

from collections.abc import Mapping

from qinglong_dispatcher.adapters.installation_roles import Connection, claims
from qinglong_dispatcher.domain import errors, installation


async def ensure_roles(conn: Connection, marks: Mapping[str, str]) -> None:
    """Create the roles of `marks` if missing, each marked, in a transaction of their own."""
    await conn.execute(claims.create_sql(marks))


async def claim_roles(conn: Connection, name: str, *, adopt_unmarked: bool) -> None:
    """Make installation `name`'s roles, or take those that exist if they are its own.

    Looks before creating anything (a refusal leaves the server as it was), creates the
    missing ones marked, then looks again: another session may have created one in between.
    An unmarked role that may be adopted (`claims.kind_role_refusal`) is marked now."""
    kinds = dict(zip(installation.roles(name), installation.KINDS, strict=True))
    for attempt in ("before", "after"):
        found = await claims.existing(conn, kinds)
        for role, existing in found.items():
            refusal = claims.kind_role_refusal(
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
            await conn.execute(claims.comment_sql(role, installation.role_mark(name, kinds[role])))


async def become_migrator(conn: Connection, name: str) -> None:
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
