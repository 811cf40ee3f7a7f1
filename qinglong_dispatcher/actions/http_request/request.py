"""The exact request an approved `http.request` plan sends, and the classified answer.

Building is pure: the receiver's base URL and the plan's path and query (in the plan's
order), the plan's headers, the `Idempotency-Key` from the dispatch identity, the body bytes
exactly as approved and, where configured, the bearer and the Standard Webhooks signature
from secrets the caller has just read. Nothing here opens a socket or imports aiohttp: the
outcome types live here so that `handler` and `evidence` never need the client library.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Final, Protocol
from urllib import parse

from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.actions.http_request import receivers
from qinglong_dispatcher.domain import errors, plans

_UNRESERVED: Final = "-._~"
_TOKEN = re.compile(r"[\x21-\x7e]+")


class RequestRefused(errors.QinglongError):
    """The plan cannot be sent to this receiver (a low-sensitivity `code` says why)."""

    code = "request_refused"


class SecretInvalid(errors.QinglongError):
    """A referenced secret has not the form its use needs."""

    code = "secret_invalid"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Credentials:
    """The secrets of one send, read just before it (rotation applies on the next send)."""

    bearer: bytes | None = dataclasses.field(default=None, repr=False)
    webhook_key: bytes | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreparedRequest:
    """What goes on the wire; its repr shows neither a header value nor the body."""

    receiver: str
    method: str
    url: str = dataclasses.field(repr=False)
    path: str
    headers: tuple[tuple[str, str], ...] = dataclasses.field(repr=False)
    body: bytes | None = dataclasses.field(repr=False)
    idempotency_key: str

    @property
    def header_names(self) -> tuple[str, ...]:
        """The header names, lowercase (safe to log)."""
        return tuple(name.lower() for name, _ in self.headers)


class OutcomeKind(enum.StrEnum):
    """What one send proved."""

    ACCEPTED = "accepted"
    """A 2xx: the receiver took it."""
    REFUSED = "refused"
    """A status of the receiver's `failed_statuses`: it proves nothing happened."""
    IN_FLIGHT = "in_flight"
    """A 409: a request with this key is being processed."""
    NOT_SENT = "not_sent"
    """The connection failed before a byte of the request was written."""
    UNCERTAIN = "uncertain"
    """Anything else after the request may have been delivered."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """A classified answer: a status, kept headers and a digest of the body, never the body
    (except `body` for an evidence lookup, bounded and kept only in memory)."""

    kind: OutcomeKind
    code: str
    status: int | None = None
    headers: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    body_digest: str | None = None
    body_bytes: int | None = None
    replayed: bool = False
    retry_after_s: float | None = None
    body: bytes | None = dataclasses.field(default=None, repr=False)

    def receipt(self, receiver: str) -> dict[str, object]:
        """The receipt: canonical-JSON values only, never a body or a request header."""
        return {
            "receiver": receiver,
            "status": self.status,
            "headers": dict(sorted(self.headers.items())),
            "bodyDigest": self.body_digest,
            "bodyBytes": self.body_bytes,
            "replayed": self.replayed,
        }


class Sender(Protocol):
    """Sends a prepared request to its receiver (`send.Sender` over aiohttp)."""

    async def send(
        self,
        receiver: receivers.Receiver,
        prepared: PreparedRequest,
        *,
        keep_body: bool = False,
    ) -> Outcome:
        """Send once (never a silent resend) and classify the answer; raises nothing but
        cancellation."""
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...


def receiver_for(receiver_set: receivers.ReceiverSet, name: str) -> receivers.Receiver:
    """The receiver a plan names; `RequestRefused(receiver_unknown)` otherwise."""
    found = receiver_set.get(name)
    if found is None:
        raise RequestRefused("the plan names no configured receiver", code="receiver_unknown")
    return found


def check(receiver: receivers.Receiver, plan: plan_model.HttpRequestPlan) -> None:
    """Refuse a plan this receiver does not allow (method, path prefix)."""
    if plan.method not in receiver.methods:
        raise RequestRefused("the receiver does not allow this method", code="method_not_allowed")
    # The plan's path is already plain (no dot segments, no encoded separators): it is
    # compared as it will be sent, with nothing normalised.
    if not receiver.allows_path(plan.path):
        raise RequestRefused(
            "the path lies outside the receiver's prefixes", code="path_outside_receiver"
        )


def read_credentials(receiver: receivers.Receiver) -> Credentials:
    """Read the receiver's secrets now; `SecretUnavailable`/`SecretInvalid` name the reference."""
    bearer = None if receiver.auth is None else receiver.auth.read()
    if bearer is not None and not _TOKEN.fullmatch(bearer.decode("latin-1")):
        raise SecretInvalid(f"secret {receiver.auth} is not a printable token")
    key = None
    if receiver.webhook_secret is not None:
        raw = receiver.webhook_secret.read()
        if not raw.startswith(b"whsec_"):
            raise SecretInvalid(f"secret {receiver.webhook_secret} does not start with whsec_")
        try:
            key = base64.b64decode(raw.removeprefix(b"whsec_"), validate=True)
        except (binascii.Error, ValueError):
            raise SecretInvalid(f"secret {receiver.webhook_secret} is not whsec_<base64>") from None
        if not key:
            raise SecretInvalid(f"secret {receiver.webhook_secret} is empty")
    return Credentials(bearer=bearer, webhook_key=key)


def url_of(receiver: receivers.Receiver, path: str, query: list[list[str]]) -> str:
    """Base URL + path + the query percent-encoded in the given order."""
    url = receiver.base_url + path
    if query:
        url += "?" + "&".join(
            f"{parse.quote(name, safe=_UNRESERVED)}={parse.quote(value, safe=_UNRESERVED)}"
            for name, value in query
        )
    return url


def build(
    receiver: receivers.Receiver,
    plan: plan_model.HttpRequestPlan,
    *,
    idempotency_key: str,
    credentials: Credentials,
    now_s: int,
) -> PreparedRequest:
    """The exact request for `plan`; `RequestRefused` when the receiver does not allow it."""
    if receiver.name != plan.receiver:
        raise RequestRefused("the plan names another receiver", code="receiver_unknown")
    check(receiver, plan)
    # The key is the dispatch id, an identifier: a valid sf-string without escaping.
    plans.require_identifier("idempotency key", idempotency_key)
    body = plan.body_bytes()
    headers = [(name, value) for name, value in plan.headers]
    headers.append(("Idempotency-Key", f'"{idempotency_key}"'))
    if plan.content_type is not None:
        headers.append(("Content-Type", plan.content_type))
    if credentials.bearer is not None:
        headers.append(("Authorization", "Bearer " + credentials.bearer.decode("ascii")))
    if credentials.webhook_key is not None:
        headers.extend(webhook_headers(credentials.webhook_key, idempotency_key, now_s, body))
    return PreparedRequest(
        receiver=receiver.name,
        method=plan.method,
        url=url_of(receiver, plan.path, plan.query),
        path=plan.path,
        headers=tuple(headers),
        body=body,
        idempotency_key=idempotency_key,
    )


def lookup_request(
    receiver: receivers.Receiver, *, idempotency_key: str, credentials: Credentials
) -> PreparedRequest:
    """The `GET lookup_path` of an evidence lookup for this key."""
    template = receiver.idempotency.lookup_path
    if template is None:
        raise RequestRefused("the receiver has no lookup path", code="lookup_unconfigured")
    plans.require_identifier("idempotency key", idempotency_key)
    path = template.replace("{key}", parse.quote(idempotency_key, safe=_UNRESERVED + ":"))
    headers = [("Idempotency-Key", f'"{idempotency_key}"')]
    if credentials.bearer is not None:
        headers.append(("Authorization", "Bearer " + credentials.bearer.decode("ascii")))
    return PreparedRequest(
        receiver=receiver.name,
        method="GET",
        url=receiver.base_url + path,
        path=path,
        headers=tuple(headers),
        body=None,
        idempotency_key=idempotency_key,
    )


def webhook_headers(
    key: bytes, message_id: str, timestamp_s: int, body: bytes | None
) -> list[tuple[str, str]]:
    """Standard Webhooks: `v1,` + base64 HMAC-SHA256 over `{id}.{timestamp}.{body}`."""
    signed = f"{message_id}.{timestamp_s}.".encode() + (body or b"")
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")
    return [
        ("webhook-id", message_id),
        ("webhook-timestamp", str(timestamp_s)),
        ("webhook-signature", f"v1,{signature}"),
    ]
