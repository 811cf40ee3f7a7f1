"""The aiohttp application: the routes, and the middlewares every request passes through.

Order, outermost first: connection bookkeeping (a request in progress keeps its connection
from the idle reaper), problem+json for every error, the body cap (413 before anything reads a
byte of it), authentication and roles, then the handler.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Final

import structlog
from aiohttp import web

from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.web import (
    approvals,
    audit_export,
    auth,
    bodies,
    connections,
    context,
    freezes,
    inbox,
    notes,
    openapi,
    operations,
    problems,
    reads,
    request_metrics,
    resubmits,
    settling,
    submits,
    subscriptions,
    votes,
)
from qinglong_dispatcher.web.oidc import pages as oidc_pages
from qinglong_dispatcher.web.ui import routes as ui_routes

log = structlog.get_logger("qinglong_dispatcher.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PREFIX: Final = "/api/v1"

ROUTES: Final[tuple[tuple[str, str, Handler], ...]] = (
    ("GET", "/dispatches", reads.list_dispatches),
    ("GET", "/dispatches/{dispatch_id}", reads.show_dispatch),
    ("GET", "/recovery", reads.list_recovery),
    ("GET", "/audit", reads.list_audit),
    ("GET", "/audit/export", audit_export.export),
    ("GET", "/status", reads.status),
    ("GET", "/events", reads.stream_events),
    ("GET", "/healthz", reads.healthz),
    ("GET", "/approvals", approvals.list_approvals),
    ("GET", "/approvals/{approval_request_id}", votes.show_approval),
    ("GET", "/policies", votes.list_policies),
    ("GET", "/freezes", freezes.list_freezes),
    ("GET", "/inbox", inbox.show_inbox),
    ("POST", "/inbox/notes", notes.write_note),
    ("GET", "/subscriptions", subscriptions.list_subscriptions),
    ("POST", "/dispatches", submits.submit),
    ("POST", "/approvals/{approval_request_id}/approve", approvals.approve),
    ("POST", "/approvals/{approval_request_id}/reject", approvals.reject),
    ("POST", "/approvals/{approval_request_id}/votes", votes.vote),
    ("POST", "/approvals/{approval_request_id}/consume", approvals.consume),
    ("POST", "/dispatches/{dispatch_id}/cancel", operations.cancel),
    ("POST", "/dispatches/{dispatch_id}/resubmit", resubmits.resubmit),
    ("POST", "/dispatches/{dispatch_id}/lift-freeze", freezes.lift),
    ("POST", "/recovery/{dispatch_id}/resolve", operations.resolve),
    ("POST", "/recovery/settle", settling.settle),
    ("POST", "/subscriptions/{name}/test", subscriptions.test_subscription),
)
"""Every route but the OpenAPI document's own, under `PREFIX`."""


@web.middleware
async def _track(request: web.Request, handler: Handler) -> web.StreamResponse:
    protocol = request.protocol
    if not isinstance(protocol, connections.Connection):
        return await handler(request)
    protocol.request_started()
    try:
        return await handler(request)
    finally:
        protocol.request_finished()


@web.middleware
async def _problems(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except problems.BadField as exc:
        return problems.from_bad_field(exc)
    except bodies.BodyTimeout:
        response = problems.response("request_timeout")
        response.force_close()  # the rest of the body may still be on its way
        return response
    except errors.QinglongError as exc:
        if problems.KINDS[problems.code_of(exc)].status >= 500:
            log.warning("api.store_failed", code=exc.code, error=exc.__class__.__name__)
        return problems.from_error(exc)
    except web.HTTPException as exc:
        return _from_http(exc)
    except Exception as exc:  # a bug: one log line, a bare 500, never a traceback to the client
        log.error("api.request_failed", error=exc.__class__.__name__, path=request.path[:200])
        return problems.response("internal")


def _from_http(exc: web.HTTPException) -> web.StreamResponse:
    if exc.status == 404:
        return problems.response("not_found")
    if exc.status == 405:
        allowed: set[str] = set(getattr(exc, "allowed_methods", ()))
        return problems.response(
            "method_not_allowed", headers={"Allow": ", ".join(sorted(allowed))}
        )
    if exc.status == 413:
        return problems.response("body_too_large")
    return problems.response("malformed_request" if exc.status < 500 else "internal")


@web.middleware
async def _body_cap(request: web.Request, handler: Handler) -> web.StreamResponse:
    cap = context.of(request).max_body_bytes
    length = request.content_length
    if length is not None and length > cap:
        response = problems.response("body_too_large", detail=f"at most {cap} bytes")
        response.force_close()  # the body is not read: the connection cannot be reused
        return response
    return await handler(request)


@auth.requires(auth.PUBLIC)
async def _openapi(request: web.Request) -> web.Response:
    return web.Response(
        body=document_bytes(),
        content_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


async def _banner(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = problems.SERVER
    if context.REQUEST_ID in request:
        response.headers[context.REQUEST_ID_HEADER] = request[context.REQUEST_ID]


def document_bytes() -> bytes:
    """The OpenAPI document as served and checked in (docs/api/openapi.json)."""
    text = json.dumps(openapi.document(), indent=2, sort_keys=True, ensure_ascii=False)
    return (text + "\n").encode()


def build(ctx: context.Context) -> web.Application:
    """The application over `ctx`."""
    app = web.Application(
        client_max_size=ctx.max_body_bytes,
        middlewares=[request_metrics.timed, _track, _problems, _body_cap, auth.authenticate],
        handler_args=None,
    )
    app[context.CONTEXT] = ctx
    app.on_response_prepare.append(_banner)
    app.on_response_prepare.append(request_metrics.observe)
    app.router.add_get(PREFIX + openapi.DOCUMENT_PATH, _openapi, allow_head=False)
    for method, path, handler in ROUTES:
        app.router.add_route(method, PREFIX + path, handler)
    oidc_pages.install(app)  # before the UI's catch-all; a 404 unless OIDC is configured
    ui_routes.install(app)  # the operator UI (/ui) on the same listener
    return app


def routed() -> set[tuple[str, str]]:
    """(method, path under PREFIX) of every route, the document's own included."""
    return {("GET", openapi.DOCUMENT_PATH), *((m, p) for m, p, _ in ROUTES)}
