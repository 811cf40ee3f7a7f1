"""The OpenAPI operation of the approvals list (web/approvals.py) and the creation-time range
both lists take."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import approval_views
from qinglong_dispatcher.web import schemas


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def time_range(rows: str) -> list[dict[str, Any]]:
    """`from_ms` (inclusive) and `to_ms` (exclusive) on the creation time of `rows`."""
    return [
        _query(
            "from_ms",
            f"only {rows} created at or after this Unix time (ms)",
            {"type": "integer", "minimum": 0},
        ),
        _query(
            "to_ms",
            f"only {rows} created before this Unix time (ms)",
            {"type": "integer", "minimum": 0},
        ),
    ]


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The route's path item (`errors`: the list's error responses)."""
    return {
        "/approvals": {
            "get": {
                "operationId": "listApprovals",
                "summary": "Approval requests of one status (the waiting ones by default), "
                "newest first, with the requester, the plan's redacted preview and, once "
                "decided, who decided, how and when (role viewer)",
                "security": [{"bearer": []}],
                "parameters": [
                    _query("action", "action type", schemas.ID),
                    _query("project", "project id", schemas.ID),
                    _query(
                        "limit",
                        "page size",
                        {"type": "integer", "minimum": 1, "maximum": approval_views.MAX_LIMIT},
                    ),
                    _query(
                        "after",
                        f"the `next` of the previous page ({approval_views.CURSOR_FORMAT}); a "
                        "position in the order of all requests, so good under any status",
                        {"type": "string"},
                    ),
                    _query(
                        "status",
                        "pending: waiting (the default); all: every status",
                        {"type": "string", "enum": list(approval_views.STATUSES)},
                    ),
                    *time_range("requests"),
                ],
                "responses": {
                    "200": {
                        "description": "A page",
                        "content": {"application/json": {"schema": schemas.ref("ApprovalPage")}},
                    },
                    **errors,
                },
            }
        }
    }
