"""Sign-in, sign-out and the session page of the operator UI.

Sign-in takes a token (`qlt_…`, as `token create` prints it), checks it as the API checks a
bearer token (the same shape, the same token store, the same per-address limiter of failures)
and exchanges it for a session in the store: a random id in a cookie (`HttpOnly`, `Secure` on
TLS, `SameSite=Strict`, `Path=/ui`), of which the store keeps only the SHA-256. Every daemon
on the store accepts it; each request re-checks its token on the same read.
"""

from __future__ import annotations

import datetime

import structlog
from aiohttp import web

from qinglong_dispatcher.domain import ui_sessions
from qinglong_dispatcher.web import auth, context, problems
from qinglong_dispatcher.web.ui import guard, markup, sessions

log = structlog.get_logger("qinglong_dispatcher.api")


def next_path(text: str | None) -> str:
    """`text` when it is a path of the UI itself, else `/ui`: never an open redirect."""
    # Only a path of the UI itself: never an open redirect to another site.
    path = (text or "").split("?", 1)[0]
    if text and guard.is_ui(path) and "\\" not in text and "//" not in text and ".." not in path:
        return text
    return "/ui"


def _signin_page(
    *, next_path: str, problem: str | None = None, status: int = 200, oidc: bool = False
) -> web.Response:
    fields = (
        markup.hidden("next", next_path)
        + '<label>Token <input type="password" name="token" autocomplete="off" required'
        " autofocus></label>"
    )
    body = (
        ("" if problem is None else markup.notice(problem, kind="error"))
        + '<form method="post" action="/ui/signin" class="stack">'
        + fields
        + '<button type="submit">Sign in</button></form>'
        + (
            "<p>"
            + markup.link(
                markup.url("/ui/oidc/start", next=next_path), "Sign in with your identity provider"
            )
            + "</p>"
            if oidc
            else ""
        )
        + '<p class="muted">Paste an API token (<code>qinglong-dispatcher token create</code>).'
        " The session ends after a while without use, at sign out, and when the token is"
        " revoked or expires.</p>"
    )
    return guard.html_response(markup.document("Sign in", body), status=status)


@auth.requires(auth.PUBLIC)
async def show(request: web.Request) -> web.StreamResponse:
    """`GET /ui/signin`: the form (signed in already: on to the overview)."""
    if await guard.current(request) is not None:
        return guard.redirect("/ui")
    oidc = context.of(request).oidc is not None
    return _signin_page(next_path=next_path(request.query.get("next")), oidc=oidc)


@auth.requires(auth.PUBLIC)
async def sign_in(request: web.Request) -> web.StreamResponse:
    """`POST /ui/signin`: a token for a session."""
    why = guard.cross_site(request)
    if why is not None:
        return guard.error_page("cross_site_refused", why, None)
    ctx = context.of(request)
    client = auth.client_key(request)
    wait = ctx.auth_failures.retry_after(client)
    if wait > 0:
        ctx.metrics.record_api_rate_limited("auth_failures")
        return guard.error_page(
            "rate_limited",
            "too many failed sign-ins",
            None,
            headers={"Retry-After": str(int(wait) + 1)},
        )
    try:
        fields = await guard.read_form(request)
    except (problems.BadField, TimeoutError, web.HTTPException):
        fields = {}  # a malformed, slow or oversized form is one more failure
    going = next_path(fields.get("next"))
    secret = fields.get("token", "").strip()
    # The API's own bearer shape (RFC 6750 b64token, bounded) before the token store is asked.
    token = auth.token_in(f"Bearer {secret}") if secret else None
    principal = None if token is None else await ctx.authenticator.authenticate(token)
    if principal is None:
        reason = "missing" if not secret else "malformed" if token is None else "invalid"
        await auth.failed(request, reason)
        return _signin_page(next_path=going, problem="That token is not valid.", status=401)
    store = context.of(request).ui_sessions
    old = request.cookies.get(sessions.COOKIE)
    if old:
        await store.close(old)
    session = await store.open(principal)
    log.info("ui.signed_in", principal=principal.principal, token_id=principal.token_id)
    response = guard.redirect(going)
    response.set_cookie(
        sessions.COOKIE,
        session.session_id,
        path=sessions.COOKIE_PATH,
        httponly=True,
        secure=request.secure,
        samesite="Strict",
    )
    return response


@guard.form(guard.Operation.SESSION)
async def sign_out(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/signout`: end this session (`everywhere=yes`: every session of the principal
    on every daemon)."""
    store = context.of(request).ui_sessions
    if fields.get("everywhere") == "yes":
        await store.close_all(session.principal.principal)
    await store.close(session.session_id)
    log.info("ui.signed_out", principal=session.principal.principal)
    oidc = context.of(request).oidc
    after = guard.own_origin(request) + "/ui/signin"
    logout = None if oidc is None else await oidc.logout_url(None, after)
    # The provider's logout by a page moving on, not a redirect: a form's redirect elsewhere is
    # what `form-action 'self'` forbids.
    response = (
        guard.redirect("/ui/signin")
        if logout is None
        else guard.html_response(markup.onward(logout, "Signing out"))
    )
    response.del_cookie(sessions.COOKIE, path=sessions.COOKIE_PATH)
    return response


def _ago(seconds: float) -> str:
    return markup.esc(str(datetime.timedelta(seconds=int(seconds))))


@guard.view(guard.Operation.SESSION)
async def session_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/session`: who is signed in, with which token, and the principal's sessions."""
    store = context.of(request).ui_sessions
    who = session.principal
    mine = await store.of_principal(who.principal)
    this = ui_sessions.digest(session.session_id)
    rows = [
        (
            "this one" if s.session_sha256 == this else "another",
            markup.esc(s.principal.token_id),
            _ago((s.now_ms - s.created_at_ms) / 1000) + " old",
            _ago(s.ends_in_ms / 1000),
        )
        for s in mine
    ]
    body = (
        markup.facts(
            (
                ("principal", markup.esc(who.principal)),
                ("role", markup.esc(who.role)),
                ("token id", f"<code>{markup.esc(who.token_id)}</code>"),
                ("idle timeout", _ago(store.idle_s)),
                ("absolute lifetime", _ago(store.lifetime_s)),
            )
        )
        + "<h2>Your sessions</h2>"
        + markup.table(("session", "token id", "age", "ends in (idle)"), rows)
        + markup.post_form(
            "/ui/signout",
            session,
            markup.hidden("everywhere", "yes"),
            "Sign out everywhere",
            danger=True,
        )
        + '<p class="muted">Sessions live in the store: every daemon on it accepts them and a'
        " restart keeps them. Signing out, or revoking the token (<code>token revoke</code>),"
        " ends them everywhere at once.</p>"
    )
    return guard.html_response(markup.document("Session", body, session=session, active="session"))
