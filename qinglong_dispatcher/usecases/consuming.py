"""Consume: an approved request becomes its immutable dispatch and execution, once
(`approval consume`, `POST /api/v1/approvals/{id}/consume`)."""

from __future__ import annotations

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.domain import approvals, principals
from qinglong_dispatcher.usecases import policy


async def consume(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    the_policy: policy.Policy,
    approval_request_id: str,
    *,
    context: principals.RequestContext | None = None,
) -> approvals.Consumed:
    """Consume an approved request into its dispatch, given the policy's attempts."""
    consumed = await store.consume(
        approval_request_id,
        now_ms=clock.now_ms(),
        max_attempts=the_policy.max_attempts,
        context=context,
    )
    if tracing.current().enabled:
        # One read more, only with tracing on: the trace the request was submitted under.
        approval = await store.get_approval(approval_request_id)
        if approval is not None:
            tracing.mark_decision("approval.consume", approval, dispatch_id=consumed.dispatch_id)
    return consumed
