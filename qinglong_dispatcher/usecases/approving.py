"""Approve: a pending request is approved by its decider (`approval approve`, `POST
/api/v1/approvals/{id}/approve`, the operator UI's form).

The store decides who may approve what (separation of duties included): a refusal is its
typed error, which each caller words in its own way.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.domain import approvals, plans, principals
from qinglong_dispatcher.usecases import consuming, policy


async def approve(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    approval_request_id: str,
    *,
    decided_by: str,
    context: principals.RequestContext | None = None,
    comment: str | None = None,
) -> approvals.Approval:
    """Approve a pending request (`context`: an API request's, for its audit row; `comment`:
    the command line's, written with the decision)."""
    plans.require_identifier("approved-by", decided_by)
    approved = await store.approve(
        approval_request_id,
        decided_by=decided_by,
        now_ms=clock.now_ms(),
        context=context,
        comment=principals.typed_comment(comment),
    )
    tracing.mark_decision("approval.vote", approved, choice="approve")
    return approved


async def approve_many(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    ids: Sequence[str],
    *,
    decided_by: str,
    comment: str | None = None,
) -> list[approvals.Approval]:
    """Approve every request, in one transaction: all or nothing (the first refusal is
    raised, naming its request); each decision carries the one `comment`."""
    plans.require_identifier("approved-by", decided_by)
    return await store.approve_many(
        ids, decided_by=decided_by, now_ms=clock.now_ms(), comment=principals.typed_comment(comment)
    )


async def approve_and_consume(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    the_policy: policy.Policy,
    approval_request_id: str,
    *,
    decided_by: str,
    context: principals.RequestContext | None = None,
) -> tuple[approvals.Approval, approvals.Consumed]:
    """Approve, then consume the request into its dispatch: two transactions (if the second
    fails, `consume` finishes it). The API's and the operator UI's approve."""
    approved = await approve(
        store, clock, approval_request_id, decided_by=decided_by, context=context
    )
    consumed = await consuming.consume(
        store, clock, the_policy, approval_request_id, context=context
    )
    return approved, consumed
