"""Execution states of docs/decisions/0001 and the transitions between them."""

from __future__ import annotations

import enum


class ExecutionStatus(enum.StrEnum):
    """The stored status of an execution row."""

    PENDING = "pending"
    """Due for a first claim once `eligible_at_ms` has passed."""
    LEASED = "leased"
    """Claimed, not yet started: an expired lease may be taken over."""
    RETRY_WAIT = "retry_wait"
    """Released before the barrier; claimable again at `eligible_at_ms`."""
    EXECUTING = "executing"
    """The start barrier committed: the handler may have had effects."""
    SUCCEEDED = "succeeded"
    """Terminal: the action's result was recorded as success."""
    FAILED = "failed"
    """Terminal: the action reported an explicit failure."""
    BLOCKED = "blocked"
    """Terminal: refused before the barrier, budget spent, or indeterminate after it."""
    CANCELLED = "cancelled"
    """Terminal: an operator cancelled it while it waited (`pending`/`retry_wait`), so it
    never reached the barrier."""


class EffectiveStatus(enum.StrEnum):
    """What operators see: `executing` whose lease expired is `recovery_required`."""

    PENDING = "pending"
    LEASED = "leased"
    RETRY_WAIT = "retry_wait"
    EXECUTING = "executing"
    RECOVERY_REQUIRED = "recovery_required"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


TERMINAL = frozenset(
    {
        ExecutionStatus.SUCCEEDED,
        ExecutionStatus.FAILED,
        ExecutionStatus.BLOCKED,
        ExecutionStatus.CANCELLED,
    }
)
"""States nothing leaves, automatically or otherwise."""

CANCELLABLE = frozenset({ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT})
"""States an operator may cancel: waiting, unclaimed, so nothing can have started. A leased
row is refused too: its holder may be about to commit the barrier."""

DUE_STATES = frozenset(
    {ExecutionStatus.PENDING, ExecutionStatus.LEASED, ExecutionStatus.RETRY_WAIT}
)
"""States that carry `eligible_at_ms` and so sit in the due index."""

ALLOWED_TRANSITIONS: frozenset[tuple[ExecutionStatus | None, ExecutionStatus]] = frozenset(
    {
        (None, ExecutionStatus.PENDING),
        (ExecutionStatus.PENDING, ExecutionStatus.LEASED),
        (ExecutionStatus.RETRY_WAIT, ExecutionStatus.LEASED),
        (ExecutionStatus.LEASED, ExecutionStatus.LEASED),  # takeover of an expired lease
        (ExecutionStatus.PENDING, ExecutionStatus.BLOCKED),  # claim budget spent
        (ExecutionStatus.RETRY_WAIT, ExecutionStatus.BLOCKED),
        (ExecutionStatus.LEASED, ExecutionStatus.BLOCKED),
        (ExecutionStatus.LEASED, ExecutionStatus.RETRY_WAIT),
        (ExecutionStatus.LEASED, ExecutionStatus.PENDING),  # shutdown yield
        (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING),
        (ExecutionStatus.EXECUTING, ExecutionStatus.SUCCEEDED),
        (ExecutionStatus.EXECUTING, ExecutionStatus.FAILED),
        (ExecutionStatus.EXECUTING, ExecutionStatus.BLOCKED),
        (ExecutionStatus.PENDING, ExecutionStatus.CANCELLED),  # operator, under the claim fence
        (ExecutionStatus.RETRY_WAIT, ExecutionStatus.CANCELLED),
        # A passage: a transactional action's claim, start, effect, receipt and completion in
        # one transaction, only for a type marked transactional and with its receipt
        # (decision 0055).
        (ExecutionStatus.PENDING, ExecutionStatus.SUCCEEDED),
    }
)
"""Every status change the store records in the ledger; anything else is a bug or tampering.

One more is admitted by the database for one code alone and left out here, as a waiting row's
exhaustion is: `leased → cancelled` with `window_expired`, once a claim's window closed and its
lease ran out before its start (decision 0046)."""

ROW_UPDATES: frozenset[tuple[ExecutionStatus, ExecutionStatus]] = frozenset(
    {(before, after) for before, after in ALLOWED_TRANSITIONS if before is not None}
    | {
        (ExecutionStatus.LEASED, ExecutionStatus.LEASED),  # renew of an unstarted lease
        (ExecutionStatus.EXECUTING, ExecutionStatus.EXECUTING),  # renew of a started lease
        (ExecutionStatus.PENDING, ExecutionStatus.PENDING),  # a handler wait made due now
    }
)
"""Every (old, new) status pair an UPDATE of an execution row may have.

The ledger's transitions plus the same-status renewals and the wake of a handler wait,
which write no event. The database
triggers of migration 0006 allow exactly these pairs (a contract test proves it on both
dialects); an insert is the `(None, pending)` transition and is checked on its own.
"""


TAKEOVERS_PER_ATTEMPT = 4
"""How many takeovers a dispatch may take per attempt of its budget (the triggers of the
takeovers migration repeat the number). A takeover refunds the attempt of a holder that died
or stalled before the barrier; a dispatch that keeps killing whoever claims it (a poison
pill) ends `blocked` with `TAKEOVERS_EXHAUSTED` after `max_takeovers` of them."""

TAKEOVERS_EXHAUSTED = "takeovers_exhausted"
"""The result code of a dispatch blocked because every claim of it died before its barrier."""

ATTEMPTS_EXHAUSTED = "attempts_exhausted"
"""The result code of a dispatch blocked because its own failures spent its budget."""


def max_takeovers(max_attempts: int) -> int:
    """The takeover bound of a dispatch with this attempt budget."""
    return TAKEOVERS_PER_ATTEMPT * max_attempts


def is_allowed(before: ExecutionStatus | None, after: ExecutionStatus) -> bool:
    """Whether `before → after` is a transition of the state machine."""
    return (before, after) in ALLOWED_TRANSITIONS


def effective_status(
    status: ExecutionStatus, lease_expires_at_ms: int | None, now_ms: int
) -> EffectiveStatus:
    """Derive the operator-facing status; recovery_required is never stored."""
    if (
        status is ExecutionStatus.EXECUTING
        and lease_expires_at_ms is not None
        and lease_expires_at_ms <= now_ms
    ):
        return EffectiveStatus.RECOVERY_REQUIRED
    return EffectiveStatus(status.value)


class ReleaseKind(enum.StrEnum):
    """How a claim is given back before the barrier."""

    RETRY = "retry"
    """Transient failure before the barrier: wait, then claim again (budget permitting)."""
    BLOCKED = "blocked"
    """The action must not run (drift, invalid plan, explicit block): terminal."""
    YIELD = "yield"
    """Shutdown: back to pending, eligible now, the claim's attempt refunded."""
    WAIT = "wait"
    """No handler for the action in this process: back to pending, eligible at the retry time
    given, the claim's attempt refunded (nothing ran, so nothing is spent)."""


class Completion(enum.StrEnum):
    """Terminal result written after the barrier."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    BLOCKED = "blocked"


def release_target(kind: ReleaseKind, attempt: int, max_attempts: int) -> ExecutionStatus:
    """The status a release lands in; a retry with the budget spent is blocked."""
    if kind is ReleaseKind.YIELD or kind is ReleaseKind.WAIT:
        return ExecutionStatus.PENDING
    if kind is ReleaseKind.RETRY and attempt < max_attempts:
        return ExecutionStatus.RETRY_WAIT
    return ExecutionStatus.BLOCKED


def retry_delay_ms(first_backoff_ms: int, attempt: int, jitter: float, cap_ms: int = 60_000) -> int:
    """Exponential backoff (×2 per attempt, capped), scaled by `jitter` in [0.5, 1.5]."""
    base = min(cap_ms, first_backoff_ms * (2 ** max(0, attempt - 1)))
    return max(1, int(base * jitter))
