"""API principals on PostgreSQL: their roles, and one transaction acting as one of them.

The authenticator pattern (PostgREST's): the API's login is NOINHERIT and a member of the
installation's `<installation>_api` role, itself NOINHERIT and holding nothing; `token create`
makes each principal a NOLOGIN role of its own, a member of exactly the kind role of its
tokens, granted to `<installation>_api` (`installation_roles.principal`). Each request is one
transaction whose first statement is `SET LOCAL ROLE <principal role>`, so the grants and
triggers decide and record that principal; the role ends with the transaction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

from qinglong_dispatcher.adapters.installation_roles import group as group_role
from qinglong_dispatcher.adapters.installation_roles import principal as principal_role
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.sql import query, tokens
from qinglong_dispatcher.domain import errors, principals

T = TypeVar("T")

_ROLE = re.compile(r"[a-z][a-z0-9_]{0,62}")


class PrincipalRunner:
    """`query.Runner` whose every transaction acts as one principal role."""

    def __init__(self, database: db.Database, role: str) -> None:
        if not _ROLE.fullmatch(role) or "_p_" not in role:
            raise ValueError(f"not a principal role: {role!r}")
        self._db = database
        self.role = role

    async def transaction(
        self, work: query.Work[T], *, write: bool = True, isolation: str = "read_committed"
    ) -> T:
        """Begin, `SET LOCAL ROLE` (nothing runs before it), run `work`, commit or roll back."""

        async def body(conn: db.Connection) -> T:
            await conn.execute(f"SET LOCAL ROLE {self.role}")
            return await work(db.PgQuery(conn, self._db.statements))

        if not write:
            return await self._db.read(body)
        return await self._db.write(body, isolation=isolation)


async def _installation(conn: db.Connection) -> str:
    from qinglong_dispatcher.adapters.postgres import migrations

    name = await migrations.installation_of(conn)
    if name is None:
        raise errors.SchemaNotMigrated("migrate the database before creating tokens")
    return name


async def installation_name(database: db.Database) -> str:
    """The database's installation (the owner of schema `qinglong`: readable by any login)."""
    return await database.read(_installation)


async def create_token(
    database: db.Database, new: principals.NewToken, *, groups: Sequence[str] = ()
) -> principals.Token:
    """Store the token and give its principal a role of the token's kind, granted to the API's
    role, and the role of each approver group in `groups` (made if missing): one transaction,
    as the administrator (a superuser, or one with CREATEROLE that is a member of the
    migrator, as for `migrate`)."""

    async def body(conn: db.Connection) -> principals.Token:
        name = await _installation(conn)
        q = db.PgQuery(conn, database.statements)
        had_tokens = any(t.principal == new.principal for t in await tokens.list_tokens(q))
        await principal_role.take(conn, name, new.principal, had_tokens=had_tokens)
        created = await tokens.create(q, new)
        # One kind at a time: the live tokens of another role were refused above.
        await principal_role.grant(conn, name, new.principal, new.role.value)
        for group in groups:
            await group_role.grant(conn, name, new.principal, group)
        return created

    return await database.write(body)


async def approver_groups(database: db.Database) -> dict[str, list[str]]:
    """Each principal's approver groups: the groups' roles its role is a member of."""

    async def read(conn: db.Connection) -> dict[str, list[str]]:
        return await group_role.members(conn, await _installation(conn))

    return await database.read(read)


async def revoke_token(database: db.Database, token_id: str) -> principals.Token | None:
    """Revoke the token; once its principal holds no live token, the API's role loses the
    principal's role too, so even a compromised API process can no longer act as it."""

    async def body(conn: db.Connection) -> principals.Token | None:
        q = db.PgQuery(conn, database.statements)
        revoked = await tokens.revoke(q, token_id)
        if revoked is None or await tokens.live_roles(q, revoked.principal):
            return revoked
        await principal_role.release(conn, await _installation(conn), revoked.principal)
        return revoked

    return await database.write(body)
