"""What every write endpoint shares: the rate limit, the body, the acting store, the audit."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors, plans, principals
from qinglong_dispatcher.web import auth, bodies, context, idempotency, problems


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Write:
    """One admitted write: who, the body, the store acting as them, and the audit context."""

    principal: principals.Authenticated
    body: dict[str, object]
    store: ports.ActingStore
    request: principals.RequestContext


async def read_body(request: web.Request, members: Collection[str]) -> dict[str, object]:
    """The body (none at all is `{}`); a member not in `members` is 400 naming it, so a body
    naming a principal or a requester is refused, never taken for the token's."""
    body: dict[str, object] = {}
    if request.body_exists:
        body = await bodies.read_object(request)
    for name in body:
        if name not in members:
            shown = name if plans.is_identifier(name) else "?"
            raise problems.BadField(shown, f"{shown}: not a member of this request's body")
    return body


async def begin(request: web.Request, members: Collection[str] = ()) -> Write | web.Response:
    """Admit a write: its principal's rate limit, then its body, then the store acting as the
    principal; a `web.Response` is the refusal to answer."""
    refused = auth.write_refusal(request)
    if refused is not None:
        return refused
    return await acting(request, await read_body(request, members))


async def acting(request: web.Request, body: dict[str, object]) -> Write:
    """The admitted write of `request`'s principal with `body` (already read and checked):
    the store acting as the principal and the audit context. The API's writes and the operator
    UI's forms both come through here."""
    ctx = context.of(request)
    who = context.principal(request)
    stores = ctx.acting if ctx.acting is not None else ctx.store
    said = comment(body)
    return Write(
        principal=who,
        body=body,
        store=await stores.acting_as(who),
        request=principals.RequestContext(
            token_id=who.token_id,
            client_address=auth.client_key(request)[:128],
            request_id=context.request_id(request),
            comment=said,
        ),
    )


def comment(body: dict[str, object]) -> str | None:
    """The body's `comment`, one printable line kept in the write's audit row (a blank one is
    none); anything else is 400 naming it."""
    value = body.get("comment")
    if value is None:
        return None
    if not isinstance(value, str):
        raise problems.BadField("comment", "comment: must be a string")
    if not value.strip():
        return None
    try:
        return principals.check_comment(value.strip())
    except errors.InvalidInput as exc:
        raise problems.BadField("comment", str(exc)) from None


def code(body: dict[str, object], name: str, *, required: bool = True) -> str | None:
    """A body member that must be a plain identifier (a reason code): 400 naming it."""
    value = body.get(name)
    if value is None:
        if required:
            raise problems.BadField(name, f"{name}: required")
        return None
    if not isinstance(value, str) or not plans.is_identifier(value):
        raise problems.BadField(name, f"{name}: must be an identifier (a code)")
    return value


def path_id(request: web.Request, name: str, missing: type[errors.QinglongError]) -> str:
    """The path segment `name` when it is an id; `missing` (a 404) when not, not echoed."""
    value = request.match_info[name]
    if not plans.is_identifier(value):
        raise missing("no such id (not an id)")
    return value


def ok(value: object, *, status: int = 200) -> web.Response:
    """A JSON answer that is never cached."""
    return web.json_response(value, status=status, headers={"Cache-Control": "no-store"})


def idempotency_key(request: web.Request) -> str | None:
    """The request's `Idempotency-Key`, if it sent one; 400 naming the header when it is not a
    valid key."""
    header = request.headers.get(idempotency.HEADER)
    key = None if header is None else idempotency.parse_key(header)
    if header is not None and key is None:
        raise problems.BadField(idempotency.HEADER, "Idempotency-Key: not a valid key")
    return key


def _replayed(begun: idempotency.Begun) -> web.Response:
    return web.Response(
        status=begun.status,
        body=begun.body,
        content_type="application/json",
        headers={"Cache-Control": "no-store", idempotency.REPLAYED: "true"},
    )


async def keyed(
    request: web.Request,
    admitted: Write,
    key: str | None,
    what: object,
    answer: Callable[[web.Request, Write], Awaitable[web.Response]],
) -> web.Response:
    """`answer` the admitted write once per `Idempotency-Key` (web/idempotency.py): a retry
    with the same key and the same `what` (the body, and whatever else names the write)
    answers the first 2xx again; another `what` under the key is 422; no key, no memory."""
    if key is None:
        return await answer(request, admitted)
    keys = context.of(request).idempotency
    who = admitted.principal.principal
    begun = keys.begin(who, key, idempotency.fingerprint(what))
    if begun.outcome is idempotency.Outcome.REPLAY:
        return _replayed(begun)
    if begun.outcome is idempotency.Outcome.MISMATCH:
        return problems.response(
            "idempotency_key_reused", detail="this key was used with another body"
        )
    if begun.outcome is idempotency.Outcome.IN_FLIGHT:
        return problems.response(
            "idempotency_key_in_flight", detail="a request with this key is being answered"
        )
    try:
        response = await answer(request, admitted)
    except BaseException:
        keys.abandon(who, key)
        raise
    assert isinstance(response.body, bytes)
    keys.finish(who, key, response.status, response.body)
    return response
