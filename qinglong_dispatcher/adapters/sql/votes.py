"""Votes on approval requests (both dialects): one vote per principal, counted by the database.

The vote's triggers (migration 0026) apply the request's policy and, in this transaction, move
the request to `approved` or `rejected` once the votes reach its numbers; this module only
writes the vote as the store's principal and explains a refusal it can see first.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import approvals as approval_sql
from qinglong_dispatcher.adapters.sql import query, tokens
from qinglong_dispatcher.domain import approvals, errors, principals


async def vote(
    q: query.Query,
    principal: approvals.Principal,
    approval_request_id: str,
    choice: approvals.Vote,
    *,
    reason: str | None,
    now_ms: int,
    context: principals.RequestContext | None = None,
    voted_by: str | None = None,
) -> approvals.Approval:
    """Cast the principal's vote; the request as the vote left it (`context`: an API
    request's, whose `api.vote` audit row, with `voted_by` as its actor, commits with the
    vote)."""
    current = await approval_sql.get(q, approval_request_id)
    if current is None:
        raise errors.ApprovalNotFound(f"approval request {approval_request_id} not found")
    if current.status is not approvals.ApprovalStatus.PENDING:
        raise errors.ApprovalStateConflict(
            f"approval request {approval_request_id} is {current.status.value}: it takes no votes"
        )
    if current.is_expired(now_ms):
        raise errors.ApprovalExpired(f"approval request {approval_request_id} has expired")
    params = {"approval_request_id": approval_request_id, "principal": principal.name}
    voted = f"approval request {approval_request_id}: this principal has voted already"
    if await q.one("own_vote", params) is not None:
        raise errors.AlreadyVoted(voted)
    if choice is approvals.Vote.APPROVE:
        # SQLite's self-approval setting (a request without a policy); PostgreSQL's roles.
        principal.check_may_approve(current.requested_principal)
    row = {**params, "vote": choice.value, "reason": reason}
    try:
        # A savepoint, so that the key's refusal (23505) of a twin vote racing this one past
        # the check above arrives typed, as the same refusal.
        await q.savepoint(lambda q: q.run("insert_vote", row))
    except errors.StoreError as exc:
        if exc.code == "constraint_violation":
            raise errors.AlreadyVoted(voted) from None
        raise
    await tokens.record_request(
        q,
        context,
        principal=principal.name,
        operation="vote",
        actor=voted_by or principal.name or "",
        project_id=current.project_id,
        subject_id=approval_request_id,
        detail_code=choice.value,
    )
    after = await approval_sql.get(q, approval_request_id)
    assert after is not None
    return after
