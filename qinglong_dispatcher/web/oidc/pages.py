"""The OIDC sign-in's two routes: `GET /ui/oidc/start` sends the browser to the provider, and
`GET /ui/oidc/callback` takes it back, verifies the identity, maps it and opens a session.

The session stands on the principal's live token, which the administrator made with
`token create` (its role, its approver groups, its PostgreSQL role): the sign-in adds no power
the database has not been given, and the mapping decides only who may sign in now and at which
role. A refusal is a page saying why, in words safe to show, and an `api.auth_failed` audit
row with its reason code (docs/security.md#oidc-principals).
"""

from __future__ import annotations

from typing import Final

import structlog
from aiohttp import web

from qinglong_dispatcher.web import auth, context
from qinglong_dispatcher.web.oidc import flow, mapping
from qinglong_dispatcher.web.ui import guard, markup, sessions, signin

log = structlog.get_logger("qinglong_dispatcher.api")

COOKIE: Final = "qinglong_oidc"
COOKIE_PATH: Final = "/ui/oidc"
"""The browser's half of a pending sign-in: `SameSite=Lax` (the provider's redirect back is a
cross-site top-level navigation, which a `Strict` cookie would not follow), `HttpOnly`."""


def _oidc(request: web.Request) -> flow.Oidc:
    found = context.of(request).oidc
    if found is None:
        raise web.HTTPNotFound()
    return found


async def refused(request: web.Request, refusal: mapping.Refusal) -> web.Response:
    """The page of a refused sign-in, and its audit row (`api.auth_failed`, the reason)."""
    await auth.failed(request, refusal.reason)
    log.warning("ui.oidc_refused", reason=refusal.reason, request_id=context.request_id(request))
    body = (
        markup.notice("Sign-in refused: " + refusal.detail + ".", kind="error")
        + markup.facts((("code", f"<code>{markup.esc(refusal.reason)}</code>"),))
        + f"<p>{markup.link(markup.url('/ui/signin'), 'Back to sign-in')}</p>"
    )
    response = guard.html_response(markup.document("Sign-in refused", body), status=403)
    response.del_cookie(COOKIE, path=COOKIE_PATH)
    return response


def _locked_out(request: web.Request) -> web.Response | None:
    """The 429 page when this address failed too often (the token sign-in's limiter)."""
    ctx = context.of(request)
    wait = ctx.auth_failures.retry_after(auth.client_key(request))
    if wait <= 0:
        return None
    ctx.metrics.record_api_rate_limited("auth_failures")
    return guard.error_page(
        "rate_limited", "too many failed sign-ins", None,
        headers={"Retry-After": str(int(wait) + 1)},
    )  # fmt: skip


@auth.requires(auth.PUBLIC)
async def start(request: web.Request) -> web.StreamResponse:
    """`GET /ui/oidc/start`: a new pending sign-in, and the browser sent to the provider."""
    oidc = _oidc(request)
    locked = _locked_out(request)
    if locked is not None:
        return locked
    try:
        browser, location = await oidc.begin(signin.next_path(request.query.get("next")))
    except mapping.Refusal as exc:
        return await refused(request, exc)
    response = web.Response(status=303, headers={"Location": location})
    response.set_cookie(
        COOKIE,
        browser,
        path=COOKIE_PATH,
        max_age=int(flow.PENDING_S),
        httponly=True,
        secure=request.secure,
        samesite="Lax",
    )
    return response


@auth.requires(auth.PUBLIC)
async def callback(request: web.Request) -> web.StreamResponse:
    """`GET /ui/oidc/callback`: the provider's answer for a session, or a refusal page."""
    oidc = _oidc(request)
    ctx = context.of(request)
    locked = _locked_out(request)
    if locked is not None:
        return locked
    try:
        state = request.query.get("state", "")[:256]
        if "error" in request.query:  # the provider's own refusal (some send no state back)
            oidc.spend(state)
            raise mapping.Refusal("oidc_provider_error", "the provider did not sign you in")
        pending = oidc.take(state, request.cookies.get(COOKIE))
        if not request.query.get("code"):
            raise mapping.Refusal("oidc_provider_error", "the provider sent no code")
        identity = await oidc.redeem(pending, request.query["code"][:2048])
        admitted = oidc.mapping.admit(identity.claims)
        anchor = await ctx.ui_sessions.store.oidc_anchor(admitted.principal)
        if anchor is None:
            raise mapping.Refusal(
                "oidc_not_enrolled", f"{admitted.principal} is not enrolled here (no live token)"
            )
        if anchor.role != admitted.role:
            raise mapping.Refusal(
                "oidc_role_mismatch",
                f"your groups give {admitted.role.value}, but {admitted.principal} is enrolled"
                f" as {anchor.role.value}",
            )
        enrolled = (await ctx.store.approver_groups()).get(anchor.principal, [])
        if set(enrolled) != set(admitted.approver_groups):
            raise mapping.Refusal(
                "oidc_groups_mismatch",
                f"your groups make you an approver of {sorted(admitted.approver_groups)}, but"
                f" {admitted.principal} is enrolled in {sorted(enrolled)}",
            )
    except mapping.Refusal as exc:
        return await refused(request, exc)
    old = request.cookies.get(sessions.COOKIE)
    if old:
        await ctx.ui_sessions.close(old)
    session = await ctx.ui_sessions.open(anchor)
    log.info("ui.signed_in", principal=anchor.principal, token_id=anchor.token_id, via="oidc")
    # A page moving on rather than a redirect: the provider's redirect back is a cross-site
    # navigation, and a browser withholds a `SameSite=Strict` cookie from all of that chain.
    response = guard.html_response(markup.onward(pending.next_path, "Signed in"))
    response.del_cookie(COOKIE, path=COOKIE_PATH)
    response.set_cookie(
        sessions.COOKIE,
        session.session_id,
        path=sessions.COOKIE_PATH,
        httponly=True,
        secure=request.secure,
        samesite="Strict",
    )
    return response


ROUTES: Final = (("GET", "/ui/oidc/start", start), ("GET", "/ui/oidc/callback", callback))


def install(app: web.Application) -> None:
    """Add the OIDC routes (before the UI's catch-all)."""
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
