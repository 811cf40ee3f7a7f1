"""The OpenAPI 3.1 document of the API, built here and checked in as docs/api/openapi.json.

`python -m qinglong_dispatcher.web.openapi > docs/api/openapi.json` writes it again; a test
keeps the served document, the checked-in one and the routes equal.
"""

from __future__ import annotations

from typing import Any, Final

import qinglong_dispatcher
from qinglong_dispatcher.domain import dispatch_views, states
from qinglong_dispatcher.web import (
    audit_export,
    freezes,
    openapi_inbox,
    openapi_lists,
    openapi_subscriptions,
    openapi_votes,
    openapi_writes,
    problems,
    resubmits,
    schemas,
)

DOCUMENT_PATH: Final = "/openapi.json"

_ID: Final = schemas.ID


_ref = schemas.ref


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {problems.CONTENT_TYPE: {"schema": _ref("Problem")}},
    }


_ERRORS: Final = {
    "400": _problem("A request field is not valid (`field` names it)"),
    "401": {
        **_problem("No valid bearer token"),
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    },
    "403": _problem("The token's role is below the endpoint's"),
    "429": {
        **_problem("Too many failed authentications from this address"),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
    "500": _problem("Server fault (no detail)"),
    "503": _problem("The store or the listener is saturated: retry after `Retry-After`"),
}


def _ok(schema: str, description: str) -> dict[str, Any]:
    return {
        "200": {
            "description": description,
            "content": {"application/json": {"schema": _ref(schema)}},
        },
        **_ERRORS,
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


_LIMIT = _query(
    "limit", "page size", {"type": "integer", "minimum": 1, "maximum": dispatch_views.MAX_LIMIT}
)


def _paths() -> dict[str, Any]:
    viewer: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "/dispatches": {
            "get": {
                "operationId": "listDispatches",
                "summary": "Dispatches, newest first, in keyset pages (role viewer)",
                "security": viewer,
                "parameters": [
                    _query(
                        "status",
                        "effective status",
                        {"type": "string", "enum": [s.value for s in states.EffectiveStatus]},
                    ),
                    _query("action", "action type", _ID),
                    _query("project", "project id", _ID),
                    _query("target", "only dispatches of this target", _ID),
                    *openapi_lists.time_range("dispatches"),
                    _LIMIT,
                    _query(
                        "after",
                        f"the `next` of the previous page ({dispatch_views.CURSOR_FORMAT})",
                        {"type": "string"},
                    ),
                ],
                "responses": _ok("DispatchPage", "A page"),
            }
        },
        "/dispatches/{dispatch_id}": {
            "get": {
                "operationId": "showDispatch",
                "summary": "One dispatch: what `dispatch show --json` prints (role viewer)",
                "security": viewer,
                "parameters": [
                    {"name": "dispatch_id", "in": "path", "required": True, "schema": _ID}
                ],
                "responses": {
                    **_ok("DispatchDetail", "The dispatch"),
                    "404": _problem("No such dispatch"),
                },
            }
        },
        "/recovery": {
            "get": {
                "operationId": "listRecovery",
                "summary": "recovery_required executions by lease expiry, in keyset pages "
                "(role viewer)",
                "security": viewer,
                "parameters": [
                    _query("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 500}),
                    _query(
                        "after",
                        "the `next` of the previous page (<since_ms>:<dispatch_id>)",
                        {"type": "string"},
                    ),
                ],
                "responses": _ok("RecoveryPage", "A page"),
            }
        },
        "/audit": {
            "get": {
                "operationId": "listAudit",
                "summary": "The security audit log, newest first, in keyset pages (role viewer)",
                "security": viewer,
                "parameters": [
                    _query("subject", "only records about this subject (a dispatch id)", _ID),
                    _query("principal", "only records naming this principal", _ID),
                    _query("kind", "only records of this kind (e.g. approval.approved)", _ID),
                    _query("limit", "page size", {"type": "integer", "minimum": 1, "maximum": 500}),
                    _query("after", "the `next` of the previous page", {"type": "string"}),
                ],
                "responses": _ok("AuditPage", "A page"),
            }
        },
        "/status": {
            "get": {
                "operationId": "status",
                "summary": "Counts per effective status: what `status --json` prints (role viewer)",
                "security": viewer,
                "responses": _ok("Status", "The counts"),
            }
        },
        "/events": {
            "get": {
                "operationId": "events",
                "summary": "Server-Sent Events: `approval.requested` and `dispatch.settled`, "
                "heartbeats (role viewer)",
                "security": viewer,
                "parameters": [
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "An event stream",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_ERRORS,
                },
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness (no token)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "Alive",
                        "content": {"application/json": {"schema": _ref("Check")}},
                    },
                    "503": {
                        "description": "No tick lately",
                        "content": {"application/json": {"schema": _ref("Check")}},
                    },
                },
            }
        },
        DOCUMENT_PATH: {
            "get": {
                "operationId": "openapi",
                "summary": "This document (no token)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The document",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
            }
        },
    }


def _merged(*parts: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for part in parts:
        for path, item in part.items():
            paths[path] = {**paths.get(path, {}), **item}
    return paths


def document() -> dict[str, Any]:
    """The whole document (paths relative to the server URL `/api/v1`)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "qinglong-dispatcher control plane",
            "version": qinglong_dispatcher.__version__,
            "description": "Deny by default: every operation but the public ones needs "
            "`Authorization: Bearer <token>`; errors are RFC 9457 problem+json (docs/api.md).",
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}],
        "paths": _merged(
            _paths(),
            openapi_writes.paths(),
            openapi_lists.paths(openapi_writes.READ_ERRORS),
            openapi_votes.paths(),
            openapi_inbox.paths(_ERRORS),
            openapi_subscriptions.paths(_ERRORS),
            audit_export.paths(_ERRORS),
            resubmits.paths(),
            freezes.paths(_ERRORS),
        ),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                **schemas.all_schemas(),
                **openapi_writes.all_schemas(),
                **openapi_votes.all_schemas(),
                **openapi_inbox.all_schemas(),
                **resubmits.all_schemas(),
                **openapi_subscriptions.all_schemas(),
                **freezes.all_schemas(),
            },
        },
    }


if __name__ == "__main__":  # pragma: no cover - the checked-in file is written with this
    import sys

    from qinglong_dispatcher.web import app

    sys.stdout.write(app.document_bytes().decode())
