"""Vote: one principal's approve or deny on a pending request (`approval vote`).

The database applies the request's policy (who may vote, how many approvals or denials
decide it) and decides in the vote's transaction; `approve` stays the one-vote decision.
"""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import approvals, principals


async def vote(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    approval_request_id: str,
    choice: approvals.Vote,
    *,
    reason: str | None = None,
    context: principals.RequestContext | None = None,
    voted_by: str | None = None,
) -> approvals.Approval:
    """Cast the store's principal's vote; the request as the votes left it (`context`: an
    API request's, for its audit row naming `voted_by`)."""
    return await store.vote(
        approval_request_id,
        choice,
        reason=reason,
        now_ms=clock.now_ms(),
        context=context,
        voted_by=voted_by,
    )
