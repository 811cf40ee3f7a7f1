"""The OpenAPI parts of the API's submit (`web/submits.py`): its body and its `traceparent`
header."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.web import schemas

SUBMIT_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["action", "plan"],
    "properties": {
        "action": {**schemas.ID, "description": "the action type"},
        "plan": {"type": "object", "description": "the exact-shape plan"},
        "not_before": {
            "type": "string",
            "description": "start no earlier than this: ISO 8601 with a zone, or a DURATION "
            "from now (`4h`); the policy's window still bounds it",
        },
        "window_for": {
            "type": "string",
            "description": "start within this DURATION of `not_before` (of the dispatch's "
            "writing without it), or not at all; the policy's window still bounds it",
        },
    },
    "additionalProperties": False,
}
"""`POST /dispatches`: the plan, and the requester's narrowing of the window."""

TRACEPARENT_PARAMETER: dict[str, Any] = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "description": "W3C trace context the request and its dispatch join (docs/traces.md); "
    "malformed, or given twice: 400 `traceparent_invalid`",
    "schema": {
        "type": "string",
        "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$",
        "maxLength": 512,
    },
}
