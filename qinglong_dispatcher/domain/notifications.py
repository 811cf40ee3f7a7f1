"""Notifications (docs/notifications.md): the outbox's events, the subscriptions that want
them, the CloudEvents envelope and Standard Webhooks signature they are sent with, and the
backoff between attempts. Pure: the deliverer brings the clock, the randomness and the key."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final, Literal

from qinglong_dispatcher.domain import errors, instants

KINDS: Final = (
    "approval.requested",
    "approval.expiring",
    "approval.approved",
    "approval.rejected",
    "approval.expired",
    "dispatch.failed",
    "dispatch.blocked",
    "dispatch.succeeded",
    "dispatch.recovery_required",
    "target.held",
)
"""Every kind the database writes (migrations 0031 and 0033)."""

DEFAULT_KINDS: Final = tuple(k for k in KINDS if k != "dispatch.succeeded")
"""What a subscription naming no kind hears: a success is asked for by name; everything that
waits on a person (a held target and a recovery among them) is heard by default."""

SOURCE: Final = "qinglong-dispatcher"
"""The CloudEvents `source` of every event (a URI-reference)."""

Format = Literal["raw", "slack"]

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_URL = re.compile(r"https?://\S+")
_REF = re.compile(r"(credential|file|env):\S+")
_PREFIX = re.compile(r"[!-~]{1,128}")


def is_name(value: str) -> bool:
    """Whether `value` may name a subscription (what `Subscription.check` accepts)."""
    return _NAME.fullmatch(value) is not None


class SubscriptionInvalid(errors.InvalidInput):
    """The subscription asked for is not one the dispatcher can keep."""

    code = "subscription_invalid"


class SubscriptionNotFound(errors.QinglongError):
    """No subscription has that name."""

    code = "subscription_not_found"


class NotifyRefused(errors.QinglongError):
    """The database refused this login a subscription's write (the owner's alone)."""

    code = "notify_refused"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """Where events go: a URL, the reference of its signing secret (never the secret), the
    kinds it hears and, optionally, one action type, one project and a target prefix."""

    name: str
    url: str
    secret_ref: str
    kinds: tuple[str, ...] = DEFAULT_KINDS
    action_type: str | None = None
    project_id: str | None = None
    target_prefix: str | None = None
    format: Format = "raw"

    def check(self) -> Subscription:
        """Itself when every field is one the database accepts; `SubscriptionInvalid` else."""
        if not is_name(self.name):
            raise SubscriptionInvalid("a name is 1-63 of a-z 0-9 _ . - starting with a-z or 0-9")
        if not _URL.fullmatch(self.url) or len(self.url) > 2048:
            raise SubscriptionInvalid("the URL must be http:// or https:// (at most 2048 bytes)")
        if not _REF.fullmatch(self.secret_ref):
            raise SubscriptionInvalid(
                "a secret reference is credential:NAME, file:/PATH or env:NAME"
            )
        unknown = sorted(set(self.kinds) - set(KINDS))
        if unknown or not self.kinds:
            raise SubscriptionInvalid(f"unknown kind {unknown[0] if unknown else '(none)'}")
        prefix = self.target_prefix
        if prefix is not None and (not _PREFIX.fullmatch(prefix) or set(prefix) & set("*?%")):
            raise SubscriptionInvalid(
                "a target prefix is 1 to 128 printable characters, no space or wildcard"
            )
        if self.format not in ("raw", "slack"):
            raise SubscriptionInvalid("the format is raw or slack")
        return self

    def matches(self, event: Event) -> bool:
        """Whether this subscription hears `event`."""
        return (
            event.kind in self.kinds
            and self.action_type in (None, event.action_type)
            and self.project_id in (None, event.project_id)
            and (
                self.target_prefix is None
                or (event.target is not None and event.target.startswith(self.target_prefix))
            )
        )

    def as_dict(self) -> dict[str, object]:
        """What `notify list --json` shows (the reference, never a secret)."""
        return {
            "name": self.name,
            "url": self.url,
            "secret_ref": self.secret_ref,
            "kinds": list(self.kinds),
            "action_type": self.action_type,
            "project_id": self.project_id,
            "target_prefix": self.target_prefix,
            "format": self.format,
        }


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One row of the outbox."""

    id: int
    kind: str
    subject_id: str
    project_id: str
    action_type: str
    at_ms: int
    payload: Mapping[str, Any]
    target: str | None = None
    """The plan's or the dispatch's target, as the database read it (None: none, or not read)."""
    message: str | None = None
    """A message id of its own (`notify test`'s sample); None: from the outbox's id."""

    @property
    def message_id(self) -> str:
        """The CloudEvents `id` and `webhook-id`: the same on every attempt, so a receiver
        deduplicates by it."""
        return self.message or f"qle_{self.id}"


def envelope(event: Event) -> dict[str, object]:
    """The CloudEvents 1.0 structured envelope of `event`."""
    return {
        "specversion": "1.0",
        "id": event.message_id,
        "source": SOURCE,
        "type": event.kind,
        "subject": event.subject_id,
        "time": instants.rfc3339(event.at_ms),
        "datacontenttype": "application/json",
        "data": {
            "projectId": event.project_id,
            "actionType": event.action_type,
            **event.payload,
        },
    }


WAITING_ON_A_VOTE: Final = ("approval.requested", "approval.expiring")
"""The kinds whose Slack link is the approve link: the page where a person votes."""


def page_link(event: Event, ui_base: str) -> str:
    """The operator UI's page of `event`'s subject under `ui_base`: an approval's (where it is
    approved or rejected) or a dispatch's."""
    page = "approvals" if event.kind.startswith("approval.") else "dispatches"
    return f"{ui_base.rstrip('/')}/ui/{page}/{urllib.parse.quote(event.subject_id, safe='')}"


def slack_message(event: Event, ui_base: str | None) -> dict[str, object]:
    """A Slack incoming-webhook message for `event`, with the link to its page: for a request
    that waits on a vote, the approve link."""
    subject = event.subject_id
    link = ""
    if ui_base:
        label = "approve or reject" if event.kind in WAITING_ON_A_VOTE else "open"
        link = f" <{page_link(event, ui_base)}|{label}>"
    return {
        "text": f"{event.kind}: {event.action_type} in {event.project_id} ({subject}){link}",
    }


def body(event: Event, fmt: Format, ui_base: str | None = None) -> bytes:
    """The bytes posted: compact JSON, keys sorted (what the signature covers)."""
    document = envelope(event) if fmt == "raw" else slack_message(event, ui_base)
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


def webhook_key(secret: bytes) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret; `SubscriptionInvalid` naming no value."""
    if not secret.startswith(b"whsec_"):
        raise SubscriptionInvalid("the signing secret does not start with whsec_")
    try:
        key = base64.b64decode(secret.removeprefix(b"whsec_"), validate=True)
    except ValueError:
        raise SubscriptionInvalid("the signing secret is not whsec_<base64>") from None
    if not key:
        raise SubscriptionInvalid("the signing secret is empty")
    return key


def signed_headers(key: bytes, message_id: str, timestamp_s: int, data: bytes) -> dict[str, str]:
    """Standard Webhooks: `v1,` + base64 HMAC-SHA256 over `{id}.{timestamp}.{body}`."""
    signed = f"{message_id}.{timestamp_s}.".encode() + data
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": f"v1,{signature}",
        "content-type": "application/json",
    }


def backoff_ms(attempt: int, *, base_ms: int, cap_ms: int, jitter: float) -> int:
    """The wait after failed attempt `attempt` (1, 2, …): doubling from `base_ms` up to
    `cap_ms`, scaled by `jitter` in [0.5, 1] (full-range jitter halves the herd)."""
    exponent = min(max(attempt - 1, 0), 30)
    return int(min(base_ms * (2**exponent), cap_ms) * min(max(jitter, 0.5), 1.0))
