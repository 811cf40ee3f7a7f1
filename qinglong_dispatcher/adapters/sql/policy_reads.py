"""Reads of approval policies and votes (both dialects): a request's policy copy, its votes,
who else may vote, its expiry; the policies in force; the waiting requests by policy.

Nothing here decides: the database applies the policy when a vote is written (migration
0026). `may_vote` is what the store can tell of the groups: the file's members on SQLite,
the members of the group roles on PostgreSQL (`pg_auth_members`, readable by every role).
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approvals, policies


async def vote_state(q: query.Query, approval_request_id: str) -> policies.VoteState | None:
    """The request's policy, votes, remaining voters and expiry; None: no such request."""
    params = {"approval_request_id": approval_request_id}
    request = await q.one("vote_request", params)
    if request is None:
        return None
    row = await q.one("request_policy", params)
    policy = None if row is None else policies.RequestPolicy.from_row(row)
    votes = tuple(policies.CastVote.from_row(v) for v in await q.all("request_votes", params))
    may_vote: tuple[str, ...] | None = None
    pending = request["status"] == approvals.ApprovalStatus.PENDING.value
    if policy is not None and policy.approver_groups and pending:
        voted = {v.principal for v in votes} | {request["requested_principal"]}
        members = [r["principal"] for r in await q.all("group_voters", params)]
        may_vote = tuple(m for m in members if m not in voted)
    elif not pending:
        may_vote = ()
    return policies.VoteState(
        policy=policy,
        votes=votes,
        may_vote=may_vote,
        expires_at_ms=int(request["expires_at_ms"]),
    )


async def policies_in_force(q: query.Query) -> list[policies.PolicyInForce]:
    """The newest version of each policy name unless it retired it, by name."""
    return [policies.PolicyInForce.from_row(r) for r in await q.all("policies_in_force")]


async def waiting_by_policy(q: query.Query) -> dict[str, int]:
    """Pending, unexpired requests (database clock) by the policy they carry ('' for none)."""
    return {r["policy"]: int(r["n"]) for r in await q.all("waiting_by_policy")}


class PolicyReadMethods:
    """The store's methods over these reads (`ports.PolicyReadStore`)."""

    runner: query.Runner

    async def vote_state(self, approval_request_id: str) -> policies.VoteState | None:
        """See `ports.PolicyReadStore.vote_state`."""
        return await self.runner.transaction(
            lambda q: vote_state(q, approval_request_id), write=False
        )

    async def policies_in_force(self) -> list[policies.PolicyInForce]:
        """See `ports.PolicyReadStore.policies_in_force`."""
        return await self.runner.transaction(policies_in_force, write=False)

    async def waiting_by_policy(self) -> dict[str, int]:
        """See `ports.PolicyReadStore.waiting_by_policy`."""
        return await self.runner.transaction(waiting_by_policy, write=False)
