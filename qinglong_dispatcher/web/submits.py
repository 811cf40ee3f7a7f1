"""`POST /api/v1/dispatches` (`submitter`): a plan for approval, requested by the principal.

The body is `{"action": TYPE, "plan": {...}}` and nothing else: the requester is the token's
principal, and a body member naming anyone (`requested_by`, `principal`) is refused 400. The
plan must have the exact shape of its version; its values never reach a log or a problem.
`Idempotency-Key` (web/idempotency.py) makes a retried submit answer the first response.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approvals as approvals_
from qinglong_dispatcher.domain import plans
from qinglong_dispatcher.usecases import requesting
from qinglong_dispatcher.web import approvals, auth, context, idempotency, problems, writing

_MEMBERS = ("action", "plan")


def _plan(body: dict[str, object], ctx: context.Context) -> plans.AnyPlan:
    action = body.get("action")
    if not isinstance(action, str) or not plans.is_identifier(action):
        raise problems.BadField("action", "action: required, an action type")
    plan = body.get("plan")
    if not isinstance(plan, dict):
        raise problems.BadField("plan", "plan: required, a JSON object")
    return requesting.parse_plan(action, plan, installed=ctx.plan_models)


async def create_as(ctx: context.Context, admitted: writing.Write) -> approvals_.Approval:
    """The body's plan and its pending approval request, requested by the admitted principal
    (the API's submit and the operator UI's form)."""
    return await requesting.request_approval(
        admitted.store,
        ctx.clock,
        ctx.policy,
        _plan(admitted.body, ctx),
        requested_by=admitted.principal.principal,
        context=admitted.request,
    )


async def _submit(request: web.Request, admitted: writing.Write) -> web.Response:
    created = await create_as(context.of(request), admitted)
    return writing.ok({"approval": approvals.approval_json(created)}, status=201)


def _replayed(begun: idempotency.Begun) -> web.Response:
    return web.Response(
        status=begun.status,
        body=begun.body,
        content_type="application/json",
        headers={"Cache-Control": "no-store", idempotency.REPLAYED: "true"},
    )


@auth.requires(auth.Operation.CREATE)
async def submit(request: web.Request) -> web.Response:
    """Create the plan and its pending approval request as the principal (201)."""
    header = request.headers.get(idempotency.HEADER)
    key = None if header is None else idempotency.parse_key(header)
    if header is not None and key is None:
        raise problems.BadField(idempotency.HEADER, "Idempotency-Key: not a valid key")
    admitted = await writing.begin(request, _MEMBERS)
    if isinstance(admitted, web.Response):
        return admitted
    if key is None:
        return await _submit(request, admitted)
    keys = context.of(request).idempotency
    who = admitted.principal.principal
    begun = keys.begin(who, key, idempotency.fingerprint(admitted.body))
    if begun.outcome is idempotency.Outcome.REPLAY:
        return _replayed(begun)
    if begun.outcome is idempotency.Outcome.MISMATCH:
        return problems.response(
            "idempotency_key_reused", detail="this key was used with another body"
        )
    if begun.outcome is idempotency.Outcome.IN_FLIGHT:
        return problems.response(
            "idempotency_key_in_flight", detail="a request with this key is being answered"
        )
    try:
        response = await _submit(request, admitted)
    except BaseException:
        keys.abandon(who, key)
        raise
    assert isinstance(response.body, bytes)
    keys.finish(who, key, response.status, response.body)
    return response
