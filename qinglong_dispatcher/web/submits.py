"""`POST /api/v1/dispatches` (`submitter`): a plan for approval, requested by the principal.

The body is `{"action": TYPE, "plan": {...}}` and nothing else: the requester is the token's
principal, and a body member naming anyone (`requested_by`, `principal`) is refused 400. The
plan must have the exact shape of its version; its values never reach a log or a problem.
`Idempotency-Key` (web/idempotency.py) makes a retried submit answer the first response.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approvals as approvals_
from qinglong_dispatcher.domain import plans, traces
from qinglong_dispatcher.usecases import requesting
from qinglong_dispatcher.web import approvals, auth, context, problems, writing

_MEMBERS = ("action", "plan")


def _plan(body: dict[str, object], ctx: context.Context) -> plans.AnyPlan:
    action = body.get("action")
    if not isinstance(action, str) or not plans.is_identifier(action):
        raise problems.BadField("action", "action: required, an action type")
    plan = body.get("plan")
    if not isinstance(plan, dict):
        raise problems.BadField("plan", "plan: required, a JSON object")
    return requesting.parse_plan(action, plan, installed=ctx.plan_models)


async def create_as(
    ctx: context.Context, admitted: writing.Write, *, traceparent: str | None = None
) -> approvals_.Approval:
    """The body's plan and its pending approval request, requested by the admitted principal
    (the API's submit and the operator UI's form), under the caller's checked `traceparent`."""
    return await requesting.request_approval(
        admitted.store,
        ctx.clock,
        ctx.policy,
        _plan(admitted.body, ctx),
        requested_by=admitted.principal.principal,
        context=admitted.request,
        traceparent=traceparent,
    )


def traceparent_of(request: web.Request) -> str | None:
    """The request's `traceparent` header, checked (`traceparent_invalid`, 400); None if absent.
    Two of them name no one trace, and are refused alike."""
    given = request.headers.getall("traceparent", [])
    if len(given) > 1:
        raise traces.InvalidTraceparent()
    return traces.optional_traceparent(given[0] if given else None)


async def _submit(request: web.Request, admitted: writing.Write) -> web.Response:
    created = await create_as(context.of(request), admitted, traceparent=traceparent_of(request))
    return writing.ok({"approval": approvals.approval_json(created)}, status=201)


@auth.requires(auth.Operation.CREATE)
async def submit(request: web.Request) -> web.Response:
    """Create the plan and its pending approval request as the principal (201)."""
    key = writing.idempotency_key(request)
    try:
        traceparent_of(request)  # refused before anything is written or remembered
    except traces.InvalidTraceparent as exc:
        return problems.from_error(exc)
    admitted = await writing.begin(request, _MEMBERS)
    if isinstance(admitted, web.Response):
        return admitted
    return await writing.keyed(request, admitted, key, admitted.body, _submit)
