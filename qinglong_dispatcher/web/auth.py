"""Authentication and roles: every request but the public ones carries a bearer token.

Deny by default: a route is public only when it is marked so, and every other route needs at
least `viewer`. A route names the operation it performs; the role it needs is the least one
the permission table (`domain/permissions.py`) allows that operation. The principal is what
the `Authenticator` returns for the token: no request field can name it. A client address that
keeps failing is refused 429 before its token is even looked at (`limits.AUTH_FAILURE_BURST`),
and each failure is counted and logged.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import structlog
from aiohttp import web

from qinglong_dispatcher.domain import errors, permissions, principals
from qinglong_dispatcher.web import context, limits, problems

log = structlog.get_logger("qinglong_dispatcher.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
H = TypeVar("H", bound=Handler)

ROLE_ATTRIBUTE: Final = "_qinglong_role"
PUBLIC: Final = "public"
Operation = permissions.Operation

_BEARER = re.compile(r"Bearer +([A-Za-z0-9\-._~+/]{1,512}=*)", re.IGNORECASE)
"""RFC 6750's `b64token`, bounded; anything else is malformed."""

CHALLENGE: Final = 'Bearer realm="qinglong-dispatcher"'


def requires(need: Operation | principals.TokenRole | str) -> Callable[[H], H]:
    """Mark a handler with the operation it performs (the product's routes), a least role as
    such (a test's), or `PUBLIC` (no token at all)."""

    def mark(handler: H) -> H:
        setattr(handler, ROLE_ATTRIBUTE, need)
        return handler

    return mark


def marked(handler: object) -> Operation | str | None:
    """What `requires` marked `handler` with, or None."""
    need = getattr(handler, ROLE_ATTRIBUTE, None)
    return need if need is None or isinstance(need, Operation) else str(need)


def required_role(request: web.Request) -> str:
    """The role the matched handler needs; `viewer` for anything unmarked (a 404, a 405)."""
    need = marked(request.match_info.handler)
    if need is None or isinstance(need, Operation):
        return permissions.least_role(need or Operation.READ).value
    return need


def client_key(request: web.Request) -> str:
    """Whom authentication failures are counted against: the peer address (a unix socket's
    peers share one key)."""
    return request.remote or "local"


def _unauthenticated(reason: str) -> web.Response:
    challenge = CHALLENGE if reason == "missing" else f'{CHALLENGE}, error="invalid_token"'
    return problems.response(
        "unauthenticated",
        detail="send Authorization: Bearer <token>",
        headers={"WWW-Authenticate": challenge},
    )


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Derive the principal, refuse 401/403/429 as due, then run the handler."""
    role = required_role(request)
    if role == PUBLIC:
        return await handler(request)
    ctx = context.of(request)
    client = client_key(request)
    wait = ctx.auth_failures.retry_after(client)
    if wait > 0:
        ctx.metrics.record_api_rate_limited("auth_failures")
        return problems.response(
            "rate_limited", detail="too many failed authentications", retry_after_s=wait
        )
    header = request.headers.get("Authorization")
    token = None if header is None else token_in(header)
    principal = None if token is None else await ctx.authenticator.authenticate(token)
    if principal is None:
        reason = "missing" if header is None else "malformed" if token is None else "invalid"
        await failed(request, reason)
        return _unauthenticated(reason)
    request[context.PRINCIPAL] = principal
    if role not in principals.ROLES or not principal.may(principals.TokenRole(role)):
        return problems.response(
            "forbidden", detail=f"needs the {role} role (the token's role is {principal.role})"
        )
    return await handler(request)


def token_in(header: str) -> str | None:
    """The token of an `Authorization` value `Bearer <token>` (RFC 6750's b64token, bounded),
    or None for anything else."""
    found = _BEARER.fullmatch(header.strip())
    return None if found is None else found.group(1)


async def failed(request: web.Request, reason: str) -> None:
    """One failed authentication of `request`'s client (`missing`, `malformed`, `invalid`):
    spent from its address's budget, counted, logged and written to the audit table."""
    ctx = context.of(request)
    client = client_key(request)
    ctx.auth_failures.spend(client)
    ctx.metrics.record_api_auth_failure()
    request_id = context.request_id(request)
    log.warning(
        "api.auth_failed",
        client=client,
        reason=reason,
        path=request.path[:200],
        request_id=request_id,
    )
    failure = principals.AuthFailure(
        client_address=client[:128], request_id=request_id, reason=reason
    )
    await _record(ctx, failure)


async def _record(ctx: context.Context, failure: principals.AuthFailure) -> None:
    # Bounded for all clients together: a flood from many addresses costs log lines, not rows.
    if ctx.auth_audits.take(limits.AUTH_AUDIT_KEY) > 0:
        ctx.metrics.record_api_auth_unaudited()
        return
    try:
        await ctx.authenticator.refused(failure)
    except errors.StoreError as exc:
        # The refusal stands; only its audit row is lost, and the log line says so.
        log.warning("api.auth_failure_unrecorded", code=exc.code, request_id=failure.request_id)


class NoTokens:
    """The authenticator until a token store is wired: every token is unknown (deny all)."""

    async def authenticate(self, secret: str) -> principals.Authenticated | None:
        return None

    async def refused(self, failure: principals.AuthFailure) -> None:
        """Nothing to record into."""


def write_refusal(request: web.Request) -> web.Response | None:
    """For the write endpoints, after authentication: None when the principal may write now
    (a token of its bucket is spent), else the 429 to answer, counted as `writes`."""
    ctx = context.of(request)
    wait = ctx.writes.take(context.principal(request).token_id)
    if wait == 0.0:
        return None
    ctx.metrics.record_api_rate_limited("writes")
    return problems.response("rate_limited", detail="too many writes", retry_after_s=wait)
