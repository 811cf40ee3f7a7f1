"""The OpenAPI operation and schemas of the subscriptions' read (web/subscriptions.py)."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.web import openapi_writes, schemas


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The route's path item (`errors`: the reads' error responses)."""
    return {
        "/subscriptions": {
            "get": {
                "operationId": "listSubscriptions",
                "summary": "Where notifications go, read-only: the schema's owner changes them "
                "with the notify command; no secret reference, each URL cut to its origin "
                "(role viewer)",
                "security": [{"bearer": []}],
                "responses": {
                    "200": {
                        "description": "The subscriptions by name",
                        "content": {"application/json": {"schema": schemas.ref("Subscriptions")}},
                    },
                    **errors,
                },
            }
        }
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operation names."""
    item = openapi_writes.object_schema(
        ["name", "destination", "kinds", "action_type", "project_id", "target_prefix", "format"],
        {
            "name": {"type": "string"},
            "destination": {
                "type": "string",
                "description": "scheme://host[:port] of the URL: its path may hold a token",
            },
            "kinds": {"type": "array", "items": {"enum": list(n.KINDS)}},
            "action_type": schemas.NULLABLE_STR,
            "project_id": schemas.NULLABLE_STR,
            "target_prefix": schemas.NULLABLE_STR,
            "format": {"enum": ["raw", "slack"]},
        },
    )
    answer = openapi_writes.object_schema(
        ["subscriptions", "read_only", "changed_by"],
        {
            "subscriptions": {"type": "array", "items": schemas.ref("Subscription")},
            "read_only": {"const": True},
            "changed_by": {"type": "string", "description": "how the schema's owner changes them"},
        },
    )
    return {"Subscription": item, "Subscriptions": answer}
