"""What every UI request passes: the session, the role, the cross-site checks of a form, the
security headers, and errors rendered as an HTML page (never a traceback).

A page handler gets the live session; a form handler also gets the posted fields, after the
request proved it comes from this site's own page: `Sec-Fetch-Site`, when sent, is
`same-origin`; `Origin`, when sent, is this listener's own; and the hidden CSRF token equals
the session's (compared in constant time). A write then goes through `admit`, the same
admission as the API's writes (the principal's write limit, the store acting as the principal,
the audit context).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Final
from urllib import parse

import structlog
from aiohttp import web

from qinglong_dispatcher.domain import errors, permissions
from qinglong_dispatcher.web import auth, context, problems, writing
from qinglong_dispatcher.web.ui import freeze_banner, markup, sessions

log = structlog.get_logger("qinglong_dispatcher.api")

HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        # The list pages' live refresh (live.py): one script of our own and its event stream.
        "script-src 'self'; connect-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
"""Set on every response under /ui (`on_prepare`)."""

UI_KINDS: Final[Mapping[str, problems.Kind]] = {
    "cross_site_refused": problems.Kind(403, "The form was not sent from this site's own page"),
    "csrf_refused": problems.Kind(403, "The form's CSRF token is missing or wrong"),
    "signed_out": problems.Kind(401, "Sign in first: the session ended or never began"),
}
"""The UI's own refusals, beside the API's problem codes."""

Page = Callable[[web.Request, sessions.Session], Awaitable[web.StreamResponse]]
Form = Callable[[web.Request, sessions.Session, dict[str, str]], Awaitable[web.StreamResponse]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Refused(Exception):
    """A refusal to render as an error page."""

    def __init__(self, code: str, detail: str | None = None, **headers: str) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}


def is_ui(path: str) -> bool:
    """Whether `path` is the UI's."""
    return path == "/ui" or path.startswith("/ui/")


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """The security headers of every UI response (errors of the outer middlewares too)."""
    if is_ui(request.path):
        response.headers.update(HEADERS)


def html_response(
    body: str, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An HTML page."""
    return web.Response(
        status=status, text=body, content_type="text/html", charset="utf-8", headers=headers
    )


def redirect(location: str) -> web.Response:
    """303 See Other to a path of the UI."""
    return web.Response(status=303, headers={"Location": location})


def kind(code: str) -> problems.Kind:
    """Status and title of an API problem code or a UI one (unknown: `internal`)."""
    return UI_KINDS.get(code) or problems.KINDS.get(code) or problems.KINDS["internal"]


def error_page(
    code: str,
    detail: str | None,
    session: sessions.Session | None,
    *,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """The HTML page of a refusal: its title and code, and its detail when it is a 4xx (the
    typed error's safe message); a 5xx shows nothing more than its title."""
    found = kind(code)
    shown = [("code", f"<code>{markup.esc(code)}</code>"), ("status", markup.esc(found.status))]
    if detail is not None and found.status < 500:
        shown.append(("detail", markup.esc(detail)))
    back = markup.link(markup.url("/ui/signin" if session is None else "/ui"), "Back")
    body = markup.notice(found.title, kind="error") + markup.facts(shown) + f"<p>{back}</p>"
    return html_response(
        markup.document(found.title, body, session=session),
        status=found.status,
        headers=headers,
    )


async def current(request: web.Request) -> sessions.Session | None:
    """The request's live session; None when there is none. The store checks its token on the
    same read (revoked or expired: no session)."""
    return await context.of(request).ui_sessions.find(request.cookies.get(sessions.COOKIE))


def cross_site(request: web.Request) -> str | None:
    """Why a form post is refused as cross-site (None: it is not)."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site != "same-origin":
        return f"Sec-Fetch-Site is {fetch_site[:40]!r}, not 'same-origin'"
    origin = request.headers.get("Origin")
    if origin == "null" and fetch_site == "same-origin":
        # What a browser sends for a same-origin form under `Referrer-Policy: no-referrer`
        # (Fetch: the policy serialises the origin as null); `Sec-Fetch-Site` is the browser's
        # own header, which no page can set, and it says same-origin.
        return None
    if origin is not None and origin != own_origin(request):
        return "Origin is not this listener's own"
    return None


def own_origin(request: web.Request) -> str:
    """This listener's origin as the browser addressed it (scheme and Host)."""
    return f"{request.scheme}://{request.host}"


async def read_form(request: web.Request) -> dict[str, str]:
    """The posted fields (`application/x-www-form-urlencoded`, under the body cap, within the
    read timeout); the first of repeated fields."""
    if request.content_type != "application/x-www-form-urlencoded":
        raise problems.BadField("body", "body: must be a form (application/x-www-form-urlencoded)")
    async with asyncio.timeout(context.of(request).read_timeout_s):
        posted = await request.post()
    fields: dict[str, str] = {}
    for name, value in posted.items():
        if isinstance(value, str) and name not in fields:
            fields[name] = value
    return fields


def spend_write(request: web.Request) -> None:
    """Spend one of the signed-in principal's writes, as the API does (`Refused` 429 when
    none is left): a form that sends something out but writes nothing counts as one too."""
    refused = auth.write_refusal(request)
    if refused is not None:
        raise Refused("rate_limited", "too many writes", Retry_After=refused.headers["Retry-After"])


async def admit(request: web.Request, body: dict[str, object]) -> writing.Write:
    """Admit a write of the signed-in principal exactly as the API admits its own: the
    principal's write limit (`Refused` 429), then the store acting as the principal."""
    spend_write(request)
    return await writing.acting(request, body)


async def _guarded(
    request: web.Request,
    session: sessions.Session | None,
    call: Callable[[], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    try:
        return await call()
    except Refused as exc:
        return error_page(exc.code, exc.detail, session, headers=exc.headers)
    except problems.BadField as exc:
        return error_page("invalid_input", str(exc), session)
    except errors.QinglongError as exc:
        code = problems.code_of(exc)
        if kind(code).status >= 500:
            log.warning("api.store_failed", code=exc.code, error=exc.__class__.__name__)
        return error_page(code, str(exc), session)
    except TimeoutError:
        response = error_page("request_timeout", None, session)
        response.force_close()
        return response
    except web.HTTPException as exc:
        code = "body_too_large" if exc.status == 413 else "malformed_request"
        return error_page(code if exc.status < 500 else "internal", None, session)
    except Exception as exc:  # a bug: one log line, a plain page, never a traceback
        log.error("api.request_failed", error=exc.__class__.__name__, path=request.path[:200])
        return error_page("internal", None, session)


def _signin_redirect(request: web.Request) -> web.Response:
    return redirect("/ui/signin?" + parse.urlencode({"next": request.path_qs[:512]}))


OPERATION: Final = "_qinglong_ui_operation"
"""The attribute naming the operation of a page or form (`view`, `form`)."""

Operation = permissions.Operation


def view(operation: Operation) -> Callable[[Page], Handler]:
    """A page (GET) for a signed-in principal the table admits to `operation`; no session: to
    sign-in."""
    role = permissions.least_role(operation)

    def wrap(handler: Page) -> Handler:
        @auth.requires(auth.PUBLIC)  # not a bearer route: the session stands for the token
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            async def call() -> web.StreamResponse:
                session = await current(request)
                if session is None:
                    return _signin_redirect(request)
                if not permissions.admits(session.principal, operation):
                    raise Refused("forbidden", f"needs the {role} role")
                page = await _guarded(request, session, lambda: handler(request, session))
                return await freeze_banner.add(request, page)

            return await _guarded(request, None, call)

        setattr(run, OPERATION, operation)
        return run

    return wrap


def form(operation: Operation) -> Callable[[Form], Handler]:
    """A form post (POST) for a signed-in principal the table admits to `operation`, refused
    unless it is same-origin and carries the session's CSRF token; nothing is read from the
    store before."""
    role = permissions.least_role(operation)

    def wrap(handler: Form) -> Handler:
        @auth.requires(auth.PUBLIC)  # not a bearer route: the session stands for the token
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            async def call() -> web.StreamResponse:
                why = cross_site(request)
                if why is not None:
                    log.warning("ui.cross_site_refused", path=request.path[:200], why=why)
                    raise Refused("cross_site_refused", why)
                session = await current(request)
                if session is None:
                    raise Refused("signed_out", "sign in again, then send the form again")
                fields = await read_form(request)
                sent = fields.get("csrf", "").encode("utf-8", "replace")
                if not hmac.compare_digest(sent, session.csrf.encode()):
                    log.warning("ui.csrf_refused", path=request.path[:200])
                    return error_page("csrf_refused", "reload the page and send it again", session)
                if not permissions.admits(session.principal, operation):
                    return error_page("forbidden", f"needs the {role} role", session)
                request[context.PRINCIPAL] = session.principal
                return await _guarded(request, session, lambda: handler(request, session, fields))

            return await _guarded(request, None, call)

        setattr(run, OPERATION, operation)
        return run

    return wrap


@dataclasses.dataclass(frozen=True, slots=True)
class Confirm:
    """What a confirmation page asks before a form is sent for real."""

    question: str
    button: str
    back: str
    """Where "Cancel" goes (a UI path)."""
    danger: bool = False
    extra: str = ""
    """Markup shown under the question (the plan's preview)."""


def confirmed(
    request: web.Request, session: sessions.Session, fields: dict[str, str], ask: Confirm
) -> web.Response | None:
    """None when the form carries `confirmed=yes`; else the page asking to confirm it (the same
    fields again, with a fresh chance to go back). Nothing is written before."""
    if fields.get("confirmed") == "yes":
        return None
    sent = [(name, value) for name, value in fields.items() if name not in ("csrf", "confirmed")]
    again = "".join(markup.hidden(name, value) for name, value in sent)
    shown = markup.facts((name, markup.esc(value)) for name, value in sent) if sent else ""
    body = (
        markup.notice(ask.question)
        + shown
        + ask.extra
        + markup.post_form(
            request.path,
            session,
            again + markup.hidden("confirmed", "yes"),
            ask.button,
            danger=ask.danger,
        )
        + " "
        + markup.link(markup.url(ask.back), "Cancel")
    )
    return html_response(markup.document("Confirm", body, session=session))
