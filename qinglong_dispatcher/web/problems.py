"""RFC 9457 problem details: every API error as `application/problem+json`, a stable `type` each.

A problem's `type` is the relative URI `/problems/<code>`; `<code>` is the low-sensitivity code
of the refusal (a typed error's `code`), stable across releases and listed in docs/api.md. A
client tells refusals apart by `type` (or `code`), never by `title` or `detail`. Server faults
(5xx) carry no detail at all: no traceback, no SQL, no path, no secret.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Final

from aiohttp import web

from qinglong_dispatcher.domain import errors

CONTENT_TYPE: Final = "application/problem+json"
TYPE_PREFIX: Final = "/problems/"
SERVER: Final = "qinglong-dispatcher"
"""The `Server` header of every response: no library or version banner."""


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """The HTTP status and fixed title of one problem code."""

    status: int
    title: str


KINDS: Final[Mapping[str, Kind]] = {
    # The request itself.
    "malformed_request": Kind(400, "The HTTP request could not be parsed"),
    "invalid_input": Kind(400, "A request field is not valid"),
    "plan_invalid": Kind(400, "The action plan does not have the exact shape of its version"),
    "canonical_json_invalid": Kind(400, "The value cannot be written as canonical JSON"),
    "unknown_action_type": Kind(400, "No action of this type is known"),
    "traceparent_invalid": Kind(400, "The traceparent header is not a W3C trace context"),
    "unauthenticated": Kind(401, "A valid bearer token is required"),
    "forbidden": Kind(403, "The principal's role does not allow this"),
    "not_found": Kind(404, "No such resource"),
    "method_not_allowed": Kind(405, "The resource does not allow this method"),
    "request_timeout": Kind(408, "The request body did not arrive in time"),
    "body_too_large": Kind(413, "The request body exceeds the size cap"),
    "headers_too_large": Kind(431, "The request headers exceed the size cap"),
    "rate_limited": Kind(429, "Too many requests: retry after the time given"),
    "idempotency_key_reused": Kind(422, "The Idempotency-Key was used with another body"),
    "idempotency_key_in_flight": Kind(409, "A request with this Idempotency-Key is in progress"),
    # Refusals the store decides (the writes map to these; PostgreSQL's QLA/QLT SQLSTATEs
    # arrive here as the typed errors the adapter translates them into).
    "dispatch_not_found": Kind(404, "No dispatch has this id"),
    "approval_not_found": Kind(404, "No approval request has this id"),
    "approval_state_conflict": Kind(409, "The approval request is not in the state needed"),
    "already_voted": Kind(409, "This principal has voted on this request already"),
    "approval_expired": Kind(409, "The approval request has expired"),
    "approval_not_permitted": Kind(403, "This principal may not take this approval step"),
    "self_approval_refused": Kind(403, "The approver is the requester"),
    "permission_denied": Kind(403, "The database does not allow this principal this change"),
    "approval_transition_refused": Kind(409, "The store refused this approval change"),
    "approval_refused": Kind(409, "The approval cannot take this step"),
    "transition_refused": Kind(409, "The store refused this state change"),
    "cancel_refused": Kind(409, "The dispatch is not waiting"),
    "resubmit_refused": Kind(409, "The dispatch cannot be requested again"),
    "recovery_refused": Kind(409, "The execution is not recovery_required, or changed"),
    "lease_conflict": Kind(409, "The execution fence no longer matches"),
    "digest_drift": Kind(409, "The plan's digest differs from the approved digest"),
    "run_conflict": Kind(409, "A Run with this key exists without a matching receipt"),
    "plan_read_refused": Kind(403, "Reading a whole plan needs a plan reader"),
    "token_refused": Kind(409, "The token cannot be created or revoked as asked"),
    "policy_refused": Kind(409, "The approval policy cannot be written as asked"),
    "policy_not_found": Kind(404, "No approval policy of this name is in force"),
    "freeze_refused": Kind(409, "The freeze, its end or its lift was refused"),
    "freeze_not_found": Kind(404, "No open freeze has this id"),
    "window_empty": Kind(422, "The requested execution window ends before it can start"),
    "subscription_not_found": Kind(404, "No subscription has this name"),
    "step_run_refused": Kind(409, "The StepRun's Run, state or binding does not allow this"),
    # The server.
    "too_many_streams": Kind(503, "Too many event streams are open: retry later"),
    "too_many_connections": Kind(503, "Too many connections are open: retry later"),
    "store_unavailable": Kind(503, "The store cannot be reached: retry later"),
    "store_busy": Kind(503, "The store is busy: retry later"),
    "store_full": Kind(503, "The store has no space left: retry later"),
    "store_error": Kind(500, "The store failed"),
    "internal": Kind(500, "Internal server error"),
}
"""Every problem code the API answers with, and its status and title."""

RETRY_AFTER_S: Final[Mapping[str, int]] = {
    "too_many_streams": 5,
    "too_many_connections": 1,
    "store_unavailable": 5,
    "store_busy": 1,
    "store_full": 30,
}
"""`Retry-After` of the 503s (a 429 computes its own)."""


def type_uri(code: str) -> str:
    """The problem `type` of `code`."""
    return TYPE_PREFIX + code


def body(
    code: str, *, detail: str | None = None, extra: Mapping[str, object] | None = None
) -> dict[str, object]:
    """The problem object of `code` (an unknown code is `internal`)."""
    if code not in KINDS:
        code = "internal"
    kind = KINDS[code]
    problem: dict[str, object] = {
        "type": type_uri(code),
        "title": kind.title,
        "status": kind.status,
        "code": code,
    }
    if detail is not None and kind.status < 500:
        problem["detail"] = detail
    problem.update(extra or {})
    return problem


def response(
    code: str,
    *,
    detail: str | None = None,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
    retry_after_s: float | None = None,
) -> web.Response:
    """A problem+json response; `field` names the request field at fault (400s)."""
    problem = body(code, detail=detail, extra=None if field is None else {"field": field})
    all_headers = {"Cache-Control": "no-store", "Server": SERVER, **(headers or {})}
    wait = retry_after_s if retry_after_s is not None else RETRY_AFTER_S.get(code)
    if wait is not None:
        all_headers["Retry-After"] = str(max(1, math.ceil(wait)))
    return web.Response(
        status=KINDS[str(problem["code"])].status,
        body=json.dumps(problem, ensure_ascii=False, separators=(",", ":")).encode(),
        content_type=CONTENT_TYPE,
        headers=all_headers,
    )


def code_of(exc: errors.QinglongError) -> str:
    """The problem code of a typed error: its own code when the API knows it, else the nearest
    class's, else `internal`."""
    if exc.code in KINDS:
        return exc.code
    for cls in type(exc).__mro__:
        code = getattr(cls, "code", None)
        if isinstance(code, str) and code in KINDS:
            return code
    return "internal"


def from_error(exc: errors.QinglongError) -> web.Response:
    """The problem of a typed error; its message is the detail of a 4xx only."""
    code = code_of(exc)
    return response(code, detail=str(exc))


class BadField(errors.InvalidInput):
    """A request field (query parameter, path segment or body member) is not valid."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def from_bad_field(exc: BadField) -> web.Response:
    """400 `invalid_input` naming the field."""
    return response("invalid_input", detail=str(exc), field=exc.field)


def raw_503(code: str = "too_many_connections") -> bytes:
    """A whole HTTP/1.1 response, for a connection refused before any request was read."""
    payload = json.dumps(body(code), separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: {CONTENT_TYPE}\r\n"
        f"Retry-After: {RETRY_AFTER_S[code]}\r\nConnection: close\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode("ascii") + payload
