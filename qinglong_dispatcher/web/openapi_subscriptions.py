"""The OpenAPI operations and schemas of the subscriptions' read and test
(web/subscriptions.py)."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.web import openapi_writes, schemas


def _test(errors: dict[str, Any]) -> dict[str, Any]:
    problem = errors["403"]["content"]
    return {
        "operationId": "testSubscription",
        "summary": "Send one signed sample to the subscription's destination, as notify test "
        "does, and report its answer; nothing is written (role operator)",
        "security": [{"bearer": []}],
        "parameters": [
            {
                "name": "name",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_.-]{0,62}$"},
            }
        ],
        "responses": {
            "200": {
                "description": "The sample was sent, or could not be: `delivered`, the status "
                "code or the `error` that stood for one, the latency",
                "content": {"application/json": {"schema": schemas.ref("SubscriptionTest")}},
            },
            **errors,
            "404": {"description": "No subscription has this name", "content": problem},
            "429": {
                "description": "Too many writes by this principal (a test counts as one), or "
                "too many failed authentications from this address",
                "content": problem,
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            },
        },
    }


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The routes' path items (`errors`: the reads' error responses)."""
    return {
        "/subscriptions/{name}/test": {"post": _test(errors)},
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
        },
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
    tested = openapi_writes.object_schema(
        ["name", "destination", "webhook_id", "delivered", "status", "error", "latency_ms"],
        {
            "name": {"type": "string"},
            "destination": {"type": "string", "description": "scheme://host[:port] of the URL"},
            "webhook_id": {"type": "string", "description": "the sample's webhook-id header"},
            "delivered": {"type": "boolean", "description": "the destination answered 2xx"},
            "status": {"type": ["integer", "null"], "description": "its HTTP status code"},
            "error": {
                "enum": [None, "http_status", "timeout", "connect_failed", "secret_unavailable"],
                "description": "why it is not delivered (null: it is)",
            },
            "latency_ms": {"type": "integer", "minimum": 0},
        },
    )
    return {"Subscription": item, "Subscriptions": answer, "SubscriptionTest": tested}
