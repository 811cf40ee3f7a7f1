"""Domain-separated digests over canonical JSON: SHA-256, or HMAC-SHA-256 for plans.

The digests of a plan (the approval's action and plan digests, a preview's field digests) are
computed by a `PlanDigests`: plain SHA-256 in an installation without a plan key ring, and
HMAC-SHA-256 under the ring's digest secret with one, so that a copy of the database cannot
confirm a guessed plan offline. Digests of what happened (receipts, evidence) stay plain.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import canonical, errors

ACTION_TAG: Final = "qinglong/approved-action@v1"
"""Domain of the action digest: `{"actionType": …, "plan": …}`, binding the type to the plan."""

PLAN_TAG: Final = "qinglong/action-plan@v1"
"""Domain of the plan digest: the plan object alone."""

RUN_RECEIPT_TAG: Final = "qinglong/approved-run-receipt@v1"
"""Domain of the evidence digest of a `run.create` receipt."""

ACTION_RECEIPT_TAG: Final = "qinglong/action-receipt@v1"
"""Domain of the digest of an action receipt (what a downstream system answered); PostgreSQL
recomputes it when the receipt is written (migration 0012)."""

ACTION_RECEIPT_MAX_BYTES: Final = 16 * 1024
"""An action receipt as canonical JSON: a status, a few headers and digests, never a body."""

# `qinglong/<domain>@v<n>`: no NUL, so the separator that follows is unambiguous.
_TAG = re.compile(r"qinglong/[A-Za-z0-9][A-Za-z0-9._/-]*@v[1-9][0-9]*")


KEY_MIN_BYTES: Final = 32
"""The least secret a keyed `PlanDigests` accepts (the ring derives exactly 32 bytes)."""


def _message(tag: str, canonical_bytes: bytes) -> bytes:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise errors.InvalidInput("digest tag: must look like qinglong/<domain>@v<n>")
    return tag.encode("ascii") + b"\0" + bytes(canonical_bytes)


def digest(tag: str, canonical_bytes: bytes) -> str:
    """Lowercase hex `sha256(tag + b"\\0" + canonical_bytes)`.

    `canonical_bytes` must already be canonical JSON (see `canonical.dumps`); a tag
    not of the form `qinglong/<domain>@v<n>` raises `InvalidInput`.
    """
    return hashlib.sha256(_message(tag, canonical_bytes)).hexdigest()


def _action_envelope(action_type: str, plan_bytes: bytes) -> bytes:
    if not isinstance(action_type, str):
        raise errors.CanonicalJsonError("$.actionType: must be a string")
    type_bytes = canonical.dumps(action_type, root="$.actionType")
    # The canonical form of the envelope, written out: "actionType" sorts before "plan".
    return b'{"actionType":' + type_bytes + b',"plan":' + bytes(plan_bytes) + b"}"


@dataclasses.dataclass(frozen=True, slots=True)
class PlanDigests:
    """How this installation digests plans: `PLAIN` (SHA-256), or `keyed(secret)`.

    A keyed digest is `HMAC-SHA256(secret, tag + b"\\0" + canonical_bytes)`: the same domains
    and the same binding as the plain one, but only a holder of the secret can compute it.
    Digests written before an installation had a secret stay plain, and still bind their
    plans: `bound` and `binds_plan` accept either form, so adding a key ring changes no
    approved digest and blocks no pending dispatch.
    """

    key: bytes | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.key is not None and len(self.key) < KEY_MIN_BYTES:
            raise errors.InvalidInput(f"plan digest key: at least {KEY_MIN_BYTES} bytes")

    @property
    def keyed(self) -> bool:
        """Whether digests need the secret (a plan key ring is configured)."""
        return self.key is not None

    def of(self, tag: str, canonical_bytes: bytes) -> str:
        """The digest of canonical bytes in domain `tag` (lowercase hex, 64 digits)."""
        message = _message(tag, canonical_bytes)
        if self.key is None:
            return hashlib.sha256(message).hexdigest()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def action_digest(self, action_type: str, plan: Mapping[str, object]) -> str:
        """The digest of `{"actionType": action_type, "plan": plan}` in domain ACTION_TAG."""
        if not isinstance(plan, Mapping):
            raise errors.CanonicalJsonError("$.plan: must be an object")
        return self.action_digest_of_canonical(action_type, canonical.dumps(plan, root="$.plan"))

    def action_digest_of_canonical(self, action_type: str, plan_bytes: bytes) -> str:
        """`action_digest` of a plan given as its canonical JSON bytes.

        Equal to `action_digest` exactly when `plan_bytes` are that plan's canonical form, so a
        digest equal to an approved one proves the bytes are the approved plan's, byte for byte.
        """
        return self.of(ACTION_TAG, _action_envelope(action_type, plan_bytes))

    def plan_digest(self, plan: Mapping[str, object]) -> str:
        """The digest of the plan object alone in domain PLAN_TAG."""
        if not isinstance(plan, Mapping):
            raise errors.CanonicalJsonError("$: must be an object")
        return self.of(PLAN_TAG, canonical.dumps(plan))

    def bound(self, action_type: str, plan_bytes: bytes, approved: str) -> str:
        """The action digest of canonical `plan_bytes` as its approval bound it.

        `approved` itself when it binds these bytes (keyed, or plain from before the key);
        otherwise this installation's digest of them, which then differs from `approved`: the
        caller reports a drift.
        """
        envelope = _action_envelope(action_type, plan_bytes)
        own = self.of(ACTION_TAG, envelope)
        if own == approved:
            return own
        if self.key is not None and digest(ACTION_TAG, envelope) == approved:
            return approved
        return own

    def binds_plan(self, plan_bytes: bytes, stored: str) -> bool:
        """Whether `stored` is the plan digest of canonical `plan_bytes`, keyed or plain."""
        if self.of(PLAN_TAG, plan_bytes) == stored:
            return True
        return self.key is not None and digest(PLAN_TAG, plan_bytes) == stored


PLAIN: Final = PlanDigests()
"""Plan digests of an installation without a plan key ring: domain-separated SHA-256."""


def keyed(secret: bytes) -> PlanDigests:
    """Plan digests under `secret` (the key ring's digest key)."""
    return PlanDigests(bytes(secret))


def evidence_digest(
    tag: str, fields: Mapping[str, object], *, max_bytes: int = canonical.PLAN_MAX_BYTES
) -> str:
    """Digest of an evidence record (e.g. a receipt's bound fields) in domain `tag`."""
    if not isinstance(fields, Mapping):
        raise errors.CanonicalJsonError("$: must be an object")
    return digest(tag, canonical.dumps(fields, max_bytes=max_bytes))


def action_receipt(receipt: Mapping[str, object]) -> tuple[str, str]:
    """An action receipt as canonical JSON text and its digest in domain ACTION_RECEIPT_TAG.

    Raises `CanonicalJsonError` (naming the path, never the value) for a receipt that is not
    a JSON object of canonical values within ACTION_RECEIPT_MAX_BYTES.
    """
    if not isinstance(receipt, Mapping):
        raise errors.CanonicalJsonError("$.receipt: must be an object")
    data = canonical.dumps(receipt, max_bytes=ACTION_RECEIPT_MAX_BYTES, root="$.receipt")
    return data.decode("utf-8"), digest(ACTION_RECEIPT_TAG, data)
