"""Domain-separated SHA-256 digests over canonical JSON."""

from __future__ import annotations

import hashlib
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


def digest(tag: str, canonical_bytes: bytes) -> str:
    """Lowercase hex `sha256(tag + b"\\0" + canonical_bytes)`.

    `canonical_bytes` must already be canonical JSON (see `canonical.dumps`); a tag
    not of the form `qinglong/<domain>@v<n>` raises `InvalidInput`.
    """
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise errors.InvalidInput("digest tag: must look like qinglong/<domain>@v<n>")
    return hashlib.sha256(tag.encode("ascii") + b"\0" + bytes(canonical_bytes)).hexdigest()


def action_digest(action_type: str, plan: Mapping[str, object]) -> str:
    """Digest of `{"actionType": action_type, "plan": plan}` in domain ACTION_TAG.

    The plan alone is held to PLAN_MAX_BYTES and the nesting cap, so the envelope
    never makes an accepted plan fail here.
    """
    if not isinstance(plan, Mapping):
        raise errors.CanonicalJsonError("$.plan: must be an object")
    return action_digest_of_canonical(action_type, canonical.dumps(plan, root="$.plan"))


def action_digest_of_canonical(action_type: str, plan_bytes: bytes) -> str:
    """`action_digest` of a plan given as its canonical JSON bytes.

    Equal to `action_digest` exactly when `plan_bytes` are that plan's canonical form, so a
    digest equal to an approved one proves the bytes are the approved plan's, byte for byte.
    """
    if not isinstance(action_type, str):
        raise errors.CanonicalJsonError("$.actionType: must be a string")
    type_bytes = canonical.dumps(action_type, root="$.actionType")
    # The canonical form of the envelope, written out: "actionType" sorts before "plan".
    envelope = b'{"actionType":' + type_bytes + b',"plan":' + bytes(plan_bytes) + b"}"
    return digest(ACTION_TAG, envelope)


def plan_digest(plan: Mapping[str, object]) -> str:
    """Digest of the plan object alone in domain PLAN_TAG."""
    if not isinstance(plan, Mapping):
        raise errors.CanonicalJsonError("$: must be an object")
    return digest(PLAN_TAG, canonical.dumps(plan))


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
