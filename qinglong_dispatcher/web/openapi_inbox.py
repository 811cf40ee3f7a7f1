"""The OpenAPI operation and schemas of the inbox (web/inbox.py)."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import inbox
from qinglong_dispatcher.web import inbox as inbox_reads
from qinglong_dispatcher.web import openapi_writes, schemas


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The route's path item (`errors`: the reads' error responses)."""
    return {
        "/inbox": {
            "get": {
                "operationId": "showInbox",
                "summary": "What waits on the token's principal: requests it may vote on (an "
                "approver) and recovery_required dispatches with their evidence's verdict (an "
                "operator); a viewer's is empty (role viewer)",
                "security": [{"bearer": []}],
                "parameters": [
                    _query("action", "only this action type", schemas.ID),
                    _query("project", "only this project", schemas.ID),
                    _query(
                        "q",
                        "only rows whose id, action, project, kind, summary or target holds "
                        "this text (case-insensitive)",
                        {"type": "string", "maxLength": inbox_reads.TEXT_MAX},
                    ),
                    _query(
                        "sort",
                        "by the time each row waits since: oldest (default) or newest first",
                        {"enum": list(inbox_reads.SORTS)},
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "The inbox",
                        "content": {"application/json": {"schema": schemas.ref("Inbox")}},
                    },
                    **errors,
                },
            }
        }
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operation names."""
    item = openapi_writes.object_schema(
        ["kind", "id", "action", "project", "since_ms", "age_ms", "summary", "target"],
        {
            "kind": {"enum": [k.value for k in inbox.Kind]},
            "id": {**schemas.ID, "description": "the approval request's or the dispatch's id"},
            "action": {"type": "string"},
            "project": {"type": "string"},
            "since_ms": {
                **schemas.MS,
                "description": "since when it waits: the request's creation, the lease's expiry",
            },
            "age_ms": {"type": "integer", "minimum": 0},
            "summary": {
                "type": "string",
                "description": "who asked and under which policy, or the evidence's verdict",
            },
            "target": {
                **schemas.NULLABLE_STR,
                "description": "the target a recovery_required dispatch holds: nothing else "
                "starts on it until it is settled",
            },
        },
    )
    answer = openapi_writes.object_schema(
        ["items", "complete"],
        {
            "items": {"type": "array", "items": schemas.ref("InboxItem")},
            "complete": {
                "type": "boolean",
                "description": "false: more rows wait than one inbox reads; narrow the filters",
            },
        },
    )
    return {"InboxItem": item, "Inbox": answer}
