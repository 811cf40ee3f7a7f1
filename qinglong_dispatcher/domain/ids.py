"""Opaque identifiers and lease tokens: every generated id of the product, in one place.

Never derived from inputs, so they carry nothing of the plan; the prefixes only help a reader of
logs and tables tell the kinds apart. The ids that key the hot tables (approvals, dispatches and
their executions, ledger lines and receipts, Runs) begin with their creation time, so each
insert lands at the right edge of its indexes instead of a random page (decision 0014 says what
that saves). Eighty random bits follow, so two ids never collide.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import uuid

_TIME_DIGITS = 12
"""Hex digits of the millisecond time prefix (wraps in the year 10889)."""


def _time_ordered(prefix: str, now_ms: int) -> str:
    """`prefix-` + the creation time (12 hex digits) + 80 random bits (20 hex digits)."""
    return f"{prefix}-{now_ms % 16**_TIME_DIGITS:012x}{secrets.token_hex(10)}"


def time_floor(prefix: str, at_ms: int) -> str:
    """The least id of kind `prefix` created at or after `at_ms` (every `_time_ordered` id of
    that kind from then on sorts at or above it)."""
    return f"{prefix}-{at_ms % 16**_TIME_DIGITS:012x}"


def new_dispatch_id(now_ms: int) -> str:
    """A dispatch id (it is also the downstream idempotency key), ordered by creation time."""
    return _time_ordered("d", now_ms)


def new_approval_request_id(now_ms: int) -> str:
    """An approval request id, ordered by creation time."""
    return _time_ordered("a", now_ms)


def is_dispatch_id(value: str) -> bool:
    """Whether `value` is shaped as a dispatch id (else, where one of the two is expected, an
    approval request id)."""
    return value.startswith("d-")


def new_run_id(now_ms: int) -> str:
    """The id of a Run that `run.create` creates, ordered by creation time."""
    return _time_ordered("r", now_ms)


def new_action_ref() -> str:
    """A fresh action ref, for plans whose submitter did not name one."""
    return f"act-{uuid.uuid4().hex}"


def new_step_run_id() -> str:
    """A Tool StepRun id."""
    return f"s-{uuid.uuid4().hex}"


def new_lease_token() -> str:
    """A claim's lease token: unguessable. It is the fence's public name (the ledger and the
    resolutions record it, and any login that reads the row sees it); its proof is not."""
    return secrets.token_hex(16)


_PROOF_KEY = secrets.token_bytes(32)
"""This process's own key: drawn at start, never stored, never sent."""


@functools.lru_cache(maxsize=1024)
def lease_proof(token: str) -> str:
    """What this process presents to move a lease it holds (docs/security.md, "The fence").

    PostgreSQL stores only the SHA-256 of the proof a claim presented and asks every later
    move of the lease for the proof again. The proof is an HMAC of the public token under this
    process's key: the process that claimed can present it again (a replayed claim or start
    after an unacknowledged commit), and no other process or login can, though the token
    itself is readable by all of them. Remembered for the last tokens: a page's start, effect
    and completion present the same proof, and it never changes within the process.
    """
    return hmac.new(_PROOF_KEY, token.encode("utf-8"), hashlib.sha256).hexdigest()
