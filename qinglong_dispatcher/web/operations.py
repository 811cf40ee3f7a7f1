"""An operator's writes: cancel a waiting dispatch, resolve a `recovery_required` one by hand.

Both run on the store acting as the token's principal; the store's fence and the database
clock decide (a live lease is refused), and the audit row commits with the change.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.web import auth, context, problems, writing

_ID = "dispatch_id"


def _transition(done: records.Transition) -> dict[str, object]:
    return {
        "dispatch_id": done.dispatch_id,
        "status": None if done.status is None else done.status.value,
        "version": done.version,
    }


@auth.requires("operator")
async def cancel(request: web.Request) -> web.Response:
    """`POST /api/v1/dispatches/{id}/cancel` `{"reason": CODE}`: a `pending` or `retry_wait`
    dispatch becomes `cancelled`."""
    admitted = await writing.begin(request, ("reason",))
    if isinstance(admitted, web.Response):
        return admitted
    dispatch_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    reason = writing.code(admitted.body, "reason")
    assert reason is not None
    done = await api.cancel_dispatch(
        admitted.store,
        context.of(request).clock,
        dispatch_id,
        operator=admitted.principal.principal,
        reason=reason,
        context=admitted.request,
    )
    return writing.ok(_transition(done))


def _resolution(body: dict[str, object]) -> states.Completion:
    value = body.get("as")
    if value is None:
        raise problems.BadField("as", "as: required (succeeded, failed or blocked)")
    try:
        return states.Completion(value if isinstance(value, str) else "")
    except ValueError:
        raise problems.BadField("as", "as: must be succeeded, failed or blocked") from None


@auth.requires("operator")
async def resolve(request: web.Request) -> web.Response:
    """`POST /api/v1/recovery/{id}/resolve` `{"as": RESULT, "reason": CODE}`: settle a
    `recovery_required` execution; refused (409) while its lease is live by either clock."""
    admitted = await writing.begin(request, ("as", "reason"))
    if isinstance(admitted, web.Response):
        return admitted
    dispatch_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    resolution = _resolution(admitted.body)
    reason = writing.code(admitted.body, "reason")
    assert reason is not None
    ctx = context.of(request)
    done = await api.resolve_manually(
        ctx.store,
        ctx.clock,
        dispatch_id,
        resolution=resolution,
        operator=admitted.principal.principal,
        reason=reason,
        acting=admitted.store,
        context=admitted.request,
    )
    return writing.ok(_transition(done))
