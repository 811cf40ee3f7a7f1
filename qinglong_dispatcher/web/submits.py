"""`POST /api/v1/dispatches` (`submitter`): a plan for approval, requested by the principal.

The body is `{"action": TYPE, "plan": {...}}`, and may narrow the execution window the policy
allows (`not_before`: ISO 8601 with a zone or a DURATION from now; `window_for`: a DURATION),
and nothing else: the requester is the token's
principal, and a body member naming anyone (`requested_by`, `principal`) is refused 400. The
plan must have the exact shape of its version; its values never reach a log or a problem.
`Idempotency-Key` (web/idempotency.py) makes a retried submit answer the first response.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approval_policies, errors, plans, traces, waits
from qinglong_dispatcher.domain import approvals as approvals_
from qinglong_dispatcher.usecases import requesting
from qinglong_dispatcher.web import approvals, auth, context, problems, writing

_MEMBERS = ("action", "plan", "not_before", "window_for")


def _plan(body: dict[str, object], ctx: context.Context) -> plans.AnyPlan:
    action = body.get("action")
    if not isinstance(action, str) or not plans.is_identifier(action):
        raise problems.BadField("action", "action: required, an action type")
    plan = body.get("plan")
    if not isinstance(plan, dict):
        raise problems.BadField("plan", "plan: required, a JSON object")
    return requesting.parse_plan(action, plan, installed=ctx.plan_models)


def _narrowing(body: dict[str, object], now_ms: int) -> waits.Narrowing | None:
    """The requester's narrowing of the window (`waits.Narrowing`), checked; None if absent."""
    parsed: dict[str, int | None] = {"not_before": None, "window_for": None}
    for field in parsed:
        value = body.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise problems.BadField(field, f"{field}: must be a string")
        try:
            parsed[field] = (
                waits.parse_moment(value, field, now_ms)
                if field == "not_before"
                else approval_policies.parse_duration(value, field)
            )
        except errors.InvalidInput as exc:
            raise problems.BadField(field, str(exc)) from None
    if parsed["not_before"] is None and parsed["window_for"] is None:
        return None
    return waits.Narrowing(
        not_before_ms=parsed["not_before"], window_for_ms=parsed["window_for"]
    ).check(now_ms=now_ms)


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
        narrowing=_narrowing(admitted.body, ctx.clock.now_ms()),
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
