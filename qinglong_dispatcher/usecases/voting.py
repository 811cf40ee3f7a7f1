"""Vote: one principal's approve or deny on a pending request (`approval vote`).

The database applies the request's policy (who may vote, how many approvals or denials
decide it) and decides in the vote's transaction; `approve` stays the one-vote decision.
"""

from __future__ import annotations

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.domain import approvals, errors, plans, principals

MAX_REASON_CHARS = 500
"""A vote's reason is a short line a reviewer reads, never a document."""


async def vote(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    approval_request_id: str,
    choice: approvals.Vote,
    *,
    reason: str | None = None,
    context: principals.RequestContext | None = None,
    voted_by: str | None = None,
    decided_by: str | None = None,
) -> approvals.Approval:
    """Cast the store's principal's vote; the request as the votes left it (`context`: an
    API request's, for its audit row naming `voted_by`; `decided_by`: the label recorded if
    this vote decides it, by default the principal's name)."""
    if decided_by is not None:
        plans.require_identifier("by", decided_by)
    if reason is not None:
        reason = _checked_reason(reason)
    voted = await store.vote(
        approval_request_id,
        choice,
        reason=reason,
        now_ms=clock.now_ms(),
        context=context,
        voted_by=voted_by,
        decided_by=decided_by,
    )
    tracing.mark_decision("approval.vote", voted, choice=choice.value)
    return voted


async def tally(store: ports.ApprovalStore, approval_request_id: str) -> approvals.Tally | None:
    """The policy a request carries and its votes so far (None: no policy)."""
    return await store.vote_tally(approval_request_id)


def _checked_reason(reason: str) -> str:
    """A reason of one printable line, at most `MAX_REASON_CHARS` (an empty one is none)."""
    reason = reason.strip()
    if len(reason) > MAX_REASON_CHARS:
        raise errors.InvalidInput(f"reason: at most {MAX_REASON_CHARS} characters")
    if not reason.isprintable():
        raise errors.InvalidInput("reason: one line of printable text")
    return reason
