"""The fencing rules (docs/state-machine.md) as pure decisions over a row read in the transaction.

Both dialects read the row, ask these functions, and then write with an update that repeats
the same conditions in SQL, so a row that changed in between is never overwritten.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus


class ClaimStep(enum.StrEnum):
    """What a claim does with a row it observed."""

    LEASE = "lease"
    EXHAUST = "exhaust"
    NONE = "none"


def claim_step(
    row: records.Execution, *, now_ms: int, owner: str, token: str | None
) -> tuple[ClaimStep, Outcome, str | None]:
    """Decide a claim: lease the row, block it (budget spent), or report why not."""
    if row.status not in states.DUE_STATES:
        if row.status is ExecutionStatus.EXECUTING:
            return ClaimStep.NONE, Outcome.NOT_CLAIMABLE, "started"
        return ClaimStep.NONE, Outcome.NOT_CLAIMABLE, "terminal"
    if (
        row.status is ExecutionStatus.LEASED
        and row.lease_owner == owner
        and token is not None
        and row.lease_token == token
        and row.lease_expires_at_ms is not None
        and row.lease_expires_at_ms > now_ms
    ):
        return ClaimStep.NONE, Outcome.REPLAYED, None
    assert row.eligible_at_ms is not None  # the CHECK constraint guarantees it in DUE_STATES
    if row.eligible_at_ms > now_ms:
        if row.status is ExecutionStatus.LEASED:
            return ClaimStep.NONE, Outcome.LIVE_LEASE, None
        return ClaimStep.NONE, Outcome.NOT_DUE, None
    if row.status is ExecutionStatus.LEASED:
        # A takeover: the holder died or stalled before its barrier. Its attempt is refunded,
        # so only the takeover bound can stop the row (a poison pill), never the budget.
        if row.takeovers >= states.max_takeovers(row.max_attempts):
            return ClaimStep.EXHAUST, Outcome.EXHAUSTED, states.TAKEOVERS_EXHAUSTED
        return ClaimStep.LEASE, Outcome.CLAIMED, None
    if row.attempt >= row.max_attempts:
        return ClaimStep.EXHAUST, Outcome.EXHAUSTED, states.ATTEMPTS_EXHAUSTED
    return ClaimStep.LEASE, Outcome.CLAIMED, None


def isolated_prefix(rows: Sequence[records.Execution]) -> int:
    """How many rows of an observed page (in due order) one page claim takes.

    An expired lease that was taken over before is a suspect: claim after claim died or
    stalled before its barrier, and it may be the reason (a poison pill). It is claimed in a
    page of its own, so that if it kills this process too, no page mate dies with it and pays
    a takeover for it; the rows before the first suspect form the page, the rest stay due for
    the next one. A first takeover is not isolated: one crash's page is taken over whole.
    """
    for index, row in enumerate(rows):
        if row.status is ExecutionStatus.LEASED and row.takeovers > 0:
            return max(index, 1)
    return len(rows)


def lease_of(row: records.Execution) -> records.Lease:
    """The lease a leased (or executing) row carries."""
    assert row.lease_owner is not None
    assert row.lease_token is not None
    assert row.lease_expires_at_ms is not None
    return records.Lease(
        dispatch_id=row.dispatch_id,
        attempt=row.attempt,
        owner=row.lease_owner,
        token=row.lease_token,
        version=row.version,
        expires_at_ms=row.lease_expires_at_ms,
    )


def identity_of(row: records.Execution) -> records.ExecutionIdentity:
    """The execution identity of a started row."""
    lease = lease_of(row)
    assert row.started_at_ms is not None
    return records.ExecutionIdentity(
        dispatch_id=row.dispatch_id,
        attempt=row.attempt,
        owner=lease.owner,
        token=lease.token,
        started_at_ms=row.started_at_ms,
        version=row.version,
        lease_expires_at_ms=lease.expires_at_ms,
    )


def started_identity(
    lease: records.Lease, *, started_at_ms: int, version: int, lease_expires_at_ms: int
) -> records.ExecutionIdentity:
    """The execution identity a lease becomes once its start barrier committed.

    `lease_expires_at_ms` is the lease the barrier granted (`start_lease_expiry`), which is
    never shorter than the claim's.
    """
    return records.ExecutionIdentity(
        dispatch_id=lease.dispatch_id,
        attempt=lease.attempt,
        owner=lease.owner,
        token=lease.token,
        started_at_ms=started_at_ms,
        version=version,
        lease_expires_at_ms=lease_expires_at_ms,
    )


def start_lease_expiry(lease: records.Lease, *, now_ms: int, lease_ms: int) -> int:
    """The lease a start barrier grants: a whole fresh lease from now, never a shorter one.

    Without it an item that waited in its page could start with milliseconds left and read
    `recovery_required` while its execute still runs.
    """
    return max(lease.expires_at_ms, now_ms + lease_ms)


def holds_lease(row: records.Execution, lease: records.Lease) -> bool:
    """Same owner, token and attempt: the version is checked separately."""
    return (
        row.lease_owner == lease.owner
        and row.lease_token == lease.token
        and row.attempt == lease.attempt
    )


def renew_refusal(row: records.Execution, lease: records.Lease, *, now_ms: int) -> str | None:
    """Why a renew is refused, or None: only the exact current, unexpired fence renews."""
    if row.status not in (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING):
        return "not_leased"
    if not holds_lease(row, lease):
        return "lease_lost"
    if row.version != lease.version:
        return "stale_version"
    if row.lease_expires_at_ms is None or row.lease_expires_at_ms <= now_ms:
        return "lease_expired"
    return None


def start_check(
    row: records.Execution,
    dispatch: records.Dispatch,
    request: records.StartRequest,
    *,
    now_ms: int,
) -> tuple[Outcome | None, str | None]:
    """(None, None) when the barrier may commit; else the outcome to report and why."""
    lease = request.lease
    if request.approval_request_id != dispatch.approval_request_id:
        return Outcome.CONFLICT, "approval_mismatch"
    if request.action_digest != dispatch.action_digest:
        return Outcome.CONFLICT, "digest_mismatch"
    if (
        row.status is ExecutionStatus.EXECUTING
        and holds_lease(row, lease)
        and row.version >= lease.version + 1
    ):
        # The barrier already committed under this fence: an unacknowledged start replays.
        return Outcome.REPLAYED, None
    if row.status is not ExecutionStatus.LEASED:
        return Outcome.CONFLICT, "not_leased"
    if not holds_lease(row, lease):
        return Outcome.CONFLICT, "lease_lost"
    if row.version != lease.version:
        return Outcome.CONFLICT, "stale_version"
    if row.lease_expires_at_ms is None or row.lease_expires_at_ms <= now_ms:
        return Outcome.EXPIRED, "lease_expired"
    return None, None


def release_refusal(row: records.Execution, lease: records.Lease) -> str | None:
    """Why a pre-barrier release is refused, or None."""
    if row.status is not ExecutionStatus.LEASED:
        return "not_leased"
    if not holds_lease(row, lease):
        return "lease_lost"
    if row.version != lease.version:
        return "stale_version"
    return None


def complete_refusal(row: records.Execution, identity: records.ExecutionIdentity) -> str | None:
    """Why a completion is refused, or None. A grown version (a renew) is accepted."""
    if row.status is not ExecutionStatus.EXECUTING:
        return "not_executing"
    if (
        row.attempt != identity.attempt
        or row.lease_owner != identity.owner
        or row.lease_token != identity.token
        or row.started_at_ms != identity.started_at_ms
    ):
        return "identity_mismatch"
    if row.version < identity.version:
        return "version_regressed"
    return None


def mutation_replay(
    event: records.ExecutionEvent,
    *,
    to_status: ExecutionStatus,
    result_code: str,
    owner: str,
    token: str,
) -> tuple[Outcome, str | None]:
    """A mutation id seen before: the same content is `existing`, anything else a conflict."""
    same = (
        event.to_status is to_status
        and event.result_code == result_code
        and event.lease_owner == owner
        and event.lease_token == token
    )
    return (Outcome.EXISTING, None) if same else (Outcome.CONFLICT, "mutation_reused")


def mutation_id(dispatch_id: str, attempt: int, what: str) -> str:
    """Deterministic per attempt, so a write whose commit was not acknowledged replays.

    Only for writes that happen at most once per attempt number (complete, recovery): a
    release uses `release_mutation_id`, because a yield refunds the attempt number.
    """
    return f"{dispatch_id}:{attempt}:{what}"


def release_mutation_id(lease: records.Lease) -> str:
    """Deterministic per row version released, so an unacknowledged release replays.

    A yield gives the attempt back (N → N−1), so the next claim is attempt N again; a release
    keyed by the attempt alone would then collide with the yield's ledger event and be refused
    as `mutation_reused`, leaving the row leased until its lease ran out. The version the
    release starts from never repeats (even when a caller reuses its token for a new claim),
    and a replay of the same release carries the same lease, hence the same id.
    """
    return f"{lease.dispatch_id}:{lease.attempt}:v{lease.version}:release"
