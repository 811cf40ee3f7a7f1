"""The API token operations of `SqlStore` (`token create|list|revoke`; the API authenticates
and records refusals)."""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import query, tokens
from qinglong_dispatcher.domain import approvals, principals

operation = query.operation


class TokenMethods:
    """API tokens: what runs them, and whom a refusal is recorded by."""

    runner: query.Runner
    approver: approvals.Principal

    list_tokens = operation(tokens.list_tokens, write=False)
    revoke_token = operation(tokens.revoke)

    async def create_token(
        self, new: principals.NewToken, *, groups: Sequence[str] = ()
    ) -> principals.Token:
        """See `ports.TokenStore.create_token`: SQLite holds the groups' members in the file."""

        async def work(q: query.Query) -> principals.Token:
            created = await tokens.create(q, new)
            await tokens.join_groups(q, new.principal, groups)
            return created

        return await self.runner.transaction(work)

    async def approver_groups(self) -> dict[str, list[str]]:
        """See `ports.TokenStore.approver_groups`: the file's members of each group."""
        return await self.runner.transaction(tokens.group_members, write=False)

    async def authenticate(self, secret: str) -> principals.Authenticated | None:
        """See `ports.TokenStore.authenticate`: a read, and a write of the last use only when
        the recorded one is over a minute old (a request does not cost a commit)."""
        found = await self.runner.transaction(lambda q: tokens.find_live(q, secret), write=False)
        if found is None:
            return None
        principal, stale = found
        if stale:
            await self.runner.transaction(lambda q: tokens.touch(q, principal.token_id))
        return principal

    async def refused(self, failure: principals.AuthFailure) -> None:
        """See `ports.Authenticator.refused`."""
        await self.runner.transaction(
            lambda q: tokens.record_refusal(q, failure, principal=self.approver.name or "")
        )
