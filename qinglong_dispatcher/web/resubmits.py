"""`POST /api/v1/dispatches/{id}/resubmit` (`submitter`): request a finished dispatch again.

A failed, blocked or cancelled dispatch (or an expired request, by its id) becomes a new
pending approval request for the same plan under a new action ref, requested by the token's
principal (`usecases.resubmitting`). The body is empty: nothing of the plan can be changed
here. The daemon's own store reads the plan (a submitter may not read plans, and never sees
it: the answer is the new request, which holds no plan); the principal's store writes the
request, so the database refuses whom it refuses a submit. `Idempotency-Key` makes a retried
re-submit answer the first request instead of making a second.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.usecases import resubmitting
from qinglong_dispatcher.web import approvals, auth, context, openapi_writes, schemas, writing

_ID = "dispatch_id"


def answer(done: resubmitting.Resubmitted) -> dict[str, object]:
    """The new request and what it was requested again from."""
    return {
        "approval": approvals.approval_json(done.approval),
        "resubmitted_from": done.source.origin,
    }


async def resubmit_as(
    ctx: context.Context, admitted: writing.Write, source_id: str
) -> resubmitting.Resubmitted:
    """Request `source_id` again as the admitted principal (the API's `resubmit` and the
    operator UI's form)."""
    return await resubmitting.resubmit(
        ctx.store,
        admitted.store,
        ctx.clock,
        ctx.policy,
        source_id,
        requested_by=admitted.principal.principal,
        context=admitted.request,
        installed=ctx.plan_models,
    )


async def _resubmit(request: web.Request, admitted: writing.Write) -> web.Response:
    source_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    done = await resubmit_as(context.of(request), admitted, source_id)
    return writing.ok(answer(done), status=201)


@auth.requires(auth.Operation.CREATE)
async def resubmit(request: web.Request) -> web.Response:
    """A new pending request for the dispatch's plan (201); `resubmit_refused` (409) when the
    dispatch is not failed, blocked or cancelled (or the request not expired)."""
    key = writing.idempotency_key(request)
    admitted = await writing.begin(request, ())
    if isinstance(admitted, web.Response):
        return admitted
    source_id = writing.path_id(request, _ID, errors.DispatchNotFound)
    return await writing.keyed(request, admitted, key, {"resubmit": source_id}, _resubmit)


def paths() -> dict[str, Any]:
    """The route's path item."""
    operation = openapi_writes.write_operation(
        "resubmitDispatch",
        "Request a failed, blocked or cancelled dispatch (or an expired request, by its id) "
        "again: a new pending approval request for the same plan under a new action ref, "
        "requested by the principal; nothing runs until it is approved",
        "submitter",
        path_id=_ID,
        body=None,
        answer="ResubmitAnswer",
        status="201",
        extra={
            "409": {
                "description": "Not failed, blocked, cancelled or expired, a plan bound to its "
                "step, a plan that cannot be opened here (`resubmit_refused`), or the "
                "Idempotency-Key is in flight",
                "content": {"application/problem+json": {"schema": schemas.ref("Problem")}},
            },
            "422": {
                "description": "The Idempotency-Key was used for another dispatch",
                "content": {"application/problem+json": {"schema": schemas.ref("Problem")}},
            },
        },
    )
    operation["parameters"].append(openapi_writes.idempotency_parameter("201"))
    return {"/dispatches/{dispatch_id}/resubmit": {"post": operation}}


def all_schemas() -> dict[str, Any]:
    """The answer's schema."""
    return {
        "ResubmitAnswer": openapi_writes.object_schema(
            ["approval", "resubmitted_from"],
            {
                "approval": schemas.ref("Approval"),
                "resubmitted_from": {
                    **schemas.ID,
                    "description": "the dispatch (or expired request) requested again",
                },
            },
        )
    }
