"""An operator's writes: cancel a waiting dispatch, resolve a `recovery_required` one by hand.

Both run on the store acting as the token's principal; the store's fence and the database
clock decide (a live lease is refused), and the audit row commits with the change.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.usecases import cancelling, resolving
from qinglong_dispatcher.web import auth, context, problems, writing

_ID = "dispatch_id"


def _transition(done: records.Transition) -> dict[str, object]:
    return {
        "dispatch_id": done.dispatch_id,
        "status": None if done.status is None else done.status.value,
        "version": done.version,
    }


@auth.requires(auth.Operation.CANCEL)
async def cancel(request: web.Request) -> web.Response:
    """`POST /api/v1/dispatches/{id}/cancel` `{"reason": CODE}`: a `pending` or `retry_wait`
    dispatch becomes `cancelled`."""
    admitted = await writing.begin(request, ("reason",))
    if isinstance(admitted, web.Response):
        return admitted
    dispatch_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    done = await cancel_as(context.of(request), admitted, dispatch_id)
    return writing.ok(_transition(done))


async def cancel_as(
    ctx: context.Context, admitted: writing.Write, dispatch_id: str
) -> records.Transition:
    """Cancel `dispatch_id` as the admitted operator with the body's `reason` (the API's
    `cancel` and the operator UI's form)."""
    reason = writing.code(admitted.body, "reason")
    assert reason is not None
    return await cancelling.cancel_dispatch(
        admitted.store,
        ctx.clock,
        dispatch_id,
        operator=admitted.principal.principal,
        reason=reason,
        context=admitted.request,
    )


def resolution_of(body: dict[str, object]) -> states.Completion:
    """The body's `as`: succeeded, failed or blocked (a 400 naming it otherwise)."""
    value = body.get("as")
    if value is None:
        raise problems.BadField("as", "as: required (succeeded, failed or blocked)")
    try:
        return states.Completion(value if isinstance(value, str) else "")
    except ValueError:
        raise problems.BadField("as", "as: must be succeeded, failed or blocked") from None


@auth.requires(auth.Operation.RESOLVE)
async def resolve(request: web.Request) -> web.Response:
    """`POST /api/v1/recovery/{id}/resolve` `{"as": RESULT, "reason": CODE}`: settle a
    `recovery_required` execution; refused (409) while its lease is live by either clock."""
    admitted = await writing.begin(request, ("as", "reason", "comment"))
    if isinstance(admitted, web.Response):
        return admitted
    dispatch_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    done = await resolve_as(context.of(request), admitted, dispatch_id)
    return writing.ok(_transition(done))


async def resolve_as(
    ctx: context.Context, admitted: writing.Write, dispatch_id: str
) -> records.Transition:
    """Settle `dispatch_id` as the admitted operator with the body's `as` and `reason` (the
    API's `resolve` and the operator UI's form)."""
    resolution = resolution_of(admitted.body)
    reason = writing.code(admitted.body, "reason")
    assert reason is not None
    return await resolving.resolve_manually(
        ctx.store,
        ctx.clock,
        dispatch_id,
        resolution=resolution,
        operator=admitted.principal.principal,
        reason=reason,
        acting=admitted.store,
        context=admitted.request,
    )
