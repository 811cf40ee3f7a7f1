"""`GET /api/v1/freezes`: the change freezes in force or to come (role viewer), and
`POST /api/v1/dispatches/{id}/lift-freeze` (role operator): the freezes covering one waiting
dispatch lifted for it alone, with a reason; the database refuses the dispatch's requester
and records the lift under the acting principal. With their OpenAPI operations and schemas.
Writing and ending freezes is the administrator's, through the CLI only."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from qinglong_dispatcher.domain import errors, freezes
from qinglong_dispatcher.web import (
    auth,
    context,
    openapi_writes,
    problems,
    reads,
    schemas,
    writing,
)


@auth.requires(auth.Operation.READ)
async def list_freezes(request: web.Request) -> web.Response:
    """The freezes in force or to come, newest first (`?all=true`: the ended ones too)."""
    reads.only_params(request, ("all",))
    every = reads.query_field("all", request.query.get("all"), _boolean) or False
    found = await context.of(request).store.list_freezes(with_ended=every)
    return writing.ok({"freezes": [freeze.as_dict() for freeze in found]})


@auth.requires(auth.Operation.LIFT)
async def lift(request: web.Request) -> web.Response:
    """`POST /api/v1/dispatches/{id}/lift-freeze` `{"reason": TEXT}`: 200 with the freezes
    lifted for it (none: no freeze covers it now)."""
    admitted = await writing.begin(request, ("reason",))
    if isinstance(admitted, web.Response):
        return admitted
    dispatch_id = writing.path_id(request, "dispatch_id", errors.DispatchNotFound)
    lifted = await lift_as(admitted, dispatch_id)
    return writing.ok({"dispatch_id": dispatch_id, "lifted": lifted})


async def lift_as(admitted: writing.Write, dispatch_id: str) -> list[int]:
    """Lift the freezes covering `dispatch_id` as the admitted operator with the body's
    `reason` (the API's `lift` and the operator UI's form); the freezes lifted."""
    value = admitted.body.get("reason")
    if not isinstance(value, str):
        raise problems.BadField("reason", "reason: required (1…200 printable characters)")
    try:
        reason = freezes.check_reason(value.strip())
    except errors.InvalidInput as exc:
        raise problems.BadField("reason", f"reason: {exc}") from None
    return await admitted.store.lift_freeze(dispatch_id, reason=reason)


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def paths(answers: dict[str, Any]) -> dict[str, Any]:
    """The operations of this module."""
    return {
        "/dispatches/{dispatch_id}/lift-freeze": {
            "post": openapi_writes.write_operation(
                "liftFreeze",
                "Lift the freezes covering one waiting dispatch, for it alone, with a reason; "
                "never by its requester (409 freeze_refused); none lifted: no freeze covers it",
                "operator",
                path_id="dispatch_id",
                body="LiftFreeze",
                answer="FreezeLifted",
            )
        },
        "/freezes": {
            "get": {
                "operationId": "listFreezes",
                "summary": "The change freezes in force or to come, newest first (role viewer)",
                "security": [{"bearer": []}],
                "parameters": [
                    {
                        "name": "all",
                        "in": "query",
                        "description": "true: the ended and past freezes too",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "The freezes",
                        "content": {"application/json": {"schema": schemas.ref("FreezeList")}},
                    },
                    **answers,
                },
            }
        },
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operation names."""
    nullable_ms = {"type": ["integer", "null"], "description": "Unix time in milliseconds"}
    freeze = {
        "freeze_id": {"type": "integer"},
        "action_type": {**schemas.NULLABLE_STR, "description": "null: every action type"},
        "project_id": {**schemas.NULLABLE_STR, "description": "null: every project"},
        "target_prefix": {**schemas.NULLABLE_STR, "description": "null: every target"},
        "from_ms": schemas.MS,
        "until_ms": schemas.MS,
        "reason": {"type": "string"},
        "created_by": {"type": "string"},
        "created_at_ms": schemas.MS,
        "ended_by": schemas.NULLABLE_STR,
        "ended_at_ms": nullable_ms,
    }
    return {
        "Freeze": openapi_writes.object_schema(sorted(freeze), freeze),
        "FreezeList": openapi_writes.object_schema(
            ["freezes"], {"freezes": {"type": "array", "items": schemas.ref("Freeze")}}
        ),
        "LiftFreeze": openapi_writes.object_schema(
            ["reason"],
            {
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": freezes.MAX_REASON,
                    "description": "why this dispatch may start during the freeze (audited)",
                }
            },
        ),
        "FreezeLifted": openapi_writes.object_schema(
            ["dispatch_id", "lifted"],
            {
                "dispatch_id": {"type": "string"},
                "lifted": {"type": "array", "items": {"type": "integer"}},
            },
        ),
    }
