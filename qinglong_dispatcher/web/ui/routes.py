"""The UI's routes on the API's application, its style sheet, and its not-found page."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Final

from aiohttp import web

from qinglong_dispatcher.web import auth
from qinglong_dispatcher.web.ui import (
    approval_pages,
    audit_pages,
    dispatch_pages,
    guard,
    inbox_pages,
    lift_pages,
    live,
    overview,
    recovery_pages,
    resubmit_pages,
    sessions,
    signin,
    subscription_pages,
    vote_pages,
)

ROUTES: Final[tuple[tuple[str, str, guard.Handler], ...]] = (
    ("GET", "/ui", overview.overview),
    ("GET", "/ui/inbox", inbox_pages.page),
    ("GET", "/ui/events", live.stream),
    ("POST", "/ui/inbox/settle", inbox_pages.settle),
    ("POST", "/ui/inbox/note", inbox_pages.write_note),
    ("GET", "/ui/signin", signin.show),
    ("POST", "/ui/signin", signin.sign_in),
    ("POST", "/ui/signout", signin.sign_out),
    ("GET", "/ui/session", signin.session_page),
    ("GET", "/ui/dispatches", dispatch_pages.list_page),
    ("GET", "/ui/dispatches/{dispatch_id}", dispatch_pages.detail_page),
    ("POST", "/ui/dispatches/{dispatch_id}/cancel", dispatch_pages.cancel),
    ("POST", "/ui/dispatches/{dispatch_id}/resubmit", resubmit_pages.resubmit),
    ("GET", "/ui/dispatches/{dispatch_id}/lift-freeze", lift_pages.page),
    ("POST", "/ui/dispatches/{dispatch_id}/lift-freeze", lift_pages.lift),
    ("GET", "/ui/approvals", approval_pages.queue),
    ("GET", "/ui/approvals/new", approval_pages.new_page),
    ("POST", "/ui/approvals/new", approval_pages.submit),
    ("GET", "/ui/approvals/{approval_request_id}", vote_pages.detail_page),
    ("POST", "/ui/approvals/{approval_request_id}/vote", vote_pages.vote),
    ("POST", "/ui/approvals/{approval_request_id}/approve", approval_pages.approve),
    ("POST", "/ui/approvals/{approval_request_id}/reject", approval_pages.reject),
    ("GET", "/ui/policies", vote_pages.policies_page),
    ("GET", "/ui/subscriptions", subscription_pages.page),
    ("POST", "/ui/subscriptions/{name}/test", subscription_pages.test),
    ("GET", "/ui/recovery", recovery_pages.queue),
    ("POST", "/ui/recovery/{dispatch_id}/resolve", recovery_pages.resolve),
    ("GET", "/ui/audit", audit_pages.audit),
)


STATIC: Final = {"ui.css": "text/css", "icon.svg": "image/svg+xml", "live.js": "text/javascript"}
"""The files under /ui/static/, from the package's `static` folder, and their types."""


@functools.cache
def _static(name: str) -> bytes:
    return resources.files("qinglong_dispatcher.web.ui").joinpath("static", name).read_bytes()


@auth.requires(auth.PUBLIC)
async def static_file(request: web.Request) -> web.StreamResponse:
    """`GET /ui/static/{name}`: the style sheet and the icon, from the package."""
    name = request.match_info["name"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=_static(name), content_type=STATIC[name], charset="utf-8")


@guard.view(guard.Operation.READ)
async def not_found(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """Any other path under /ui (signed in; else to sign-in first)."""
    return guard.error_page("not_found", "no page has this address", session)


@auth.requires(auth.PUBLIC)
async def root(request: web.Request) -> web.StreamResponse:
    """`GET /`: to the UI (a browser typing the address is not a failed authentication)."""
    return web.Response(status=302, headers={"Location": "/ui"})


def install(app: web.Application) -> None:
    """Add the UI's routes to the API's application (its sessions are the context's)."""
    app.on_response_prepare.append(guard.on_prepare)
    app.router.add_get("/", root, allow_head=False)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    app.router.add_get("/ui/static/{name}", static_file, allow_head=False)
    app.router.add_route("*", "/ui/{tail:.*}", not_found)
