"""Cancel: an operator cancels a waiting dispatch (`dispatch cancel`, `POST
/api/v1/dispatches/{id}/cancel`, the operator UI's form)."""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import cancels, errors, plans, principals, records


async def cancel_dispatch(
    store: ports.CancelStore,
    clock: ports.Clock,
    dispatch_id: str,
    *,
    operator: str,
    reason: str,
    context: principals.RequestContext | None = None,
) -> records.Transition:
    """An operator cancels a `pending` or `retry_wait` dispatch (audited, fenced, one
    transaction); any other state, or a claim that commits first, is `CancelRefused`."""
    plans.require_identifier("operator", operator)
    plans.require_identifier("reason", reason)
    request = cancels.Cancel(dispatch_id=dispatch_id, operator=operator, reason_code=reason)
    try:
        done = await store.cancel_dispatch(request, now_ms=clock.now_ms(), context=context)
    except errors.TransitionRefused as exc:
        if exc.rule != "operator":
            raise
        raise errors.CancelRefused(
            f"dispatch {dispatch_id} was not cancelled: cancelling needs an operator login "
            "(a member of the installation's _operator role)"
        ) from exc
    if done.outcome is records.Outcome.NOT_FOUND:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    if done.outcome is not records.Outcome.COMPLETED:
        now = "was claimed while cancelling" if done.reason == "raced" else f"is {done.reason}"
        raise errors.CancelRefused(
            f"dispatch {dispatch_id} {now}: only pending or retry_wait can be cancelled"
        )
    return done
