"""Reject: a pending request is cancelled and can never be approved or consumed (`approval
reject`, `POST /api/v1/approvals/{id}/reject`, the operator UI's form)."""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import approvals, plans, principals


async def reject(
    store: ports.ApprovalStore,
    clock: ports.Clock,
    approval_request_id: str,
    *,
    decided_by: str,
    reason: str | None = None,
    context: principals.RequestContext | None = None,
    comment: str | None = None,
) -> approvals.Approval:
    """Reject a pending request (`reason`: a code an API request records in its audit row;
    `comment`: the command line's, written with the decision)."""
    plans.require_identifier("by", decided_by)
    return await store.reject(
        approval_request_id,
        decided_by=decided_by,
        now_ms=clock.now_ms(),
        context=context,
        reason=reason,
        comment=principals.typed_comment(comment),
    )
