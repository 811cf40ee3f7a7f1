"""`GET /api/v1/freezes`: the change freezes in force or to come (role viewer), with its
OpenAPI operation and schema. Writing them is the administrator's, through the CLI only."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from qinglong_dispatcher.web import auth, context, openapi_writes, reads, schemas, writing


@auth.requires(auth.Operation.READ)
async def list_freezes(request: web.Request) -> web.Response:
    """The freezes in force or to come, newest first (`?all=true`: the ended ones too)."""
    reads.only_params(request, ("all",))
    every = reads.query_field("all", request.query.get("all"), _boolean) or False
    found = await context.of(request).store.list_freezes(with_ended=every)
    return writing.ok({"freezes": [freeze.as_dict() for freeze in found]})


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The operation of this module."""
    return {
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
                    **errors,
                },
            }
        }
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
    }
