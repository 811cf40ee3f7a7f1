"""The execution contract (docs/state-machine.md), both dialects: releases, completions, events."""

from __future__ import annotations

from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import claim_one, started
from tests.support.stores import Harness


async def test_attempt_budget_ends_in_blocked(harness: Harness, clock: ManualClock) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    for attempt in (1, 2):
        claim = await claim_one(harness, clock)
        assert claim.lease is not None
        assert claim.lease.attempt == attempt
        released = await harness.store.release_preflight(
            claim.lease,
            mutation_id=f"rel-{attempt}",
            kind=states.ReleaseKind.RETRY,
            result_code="transient",
            retry_at_ms=clock.now_ms() + 100,
            now_ms=clock.now_ms(),
        )
        expected = ExecutionStatus.RETRY_WAIT if attempt == 1 else ExecutionStatus.BLOCKED
        assert (released.outcome, released.status) == (Outcome.RELEASED, expected)
        clock.advance(ms=100)
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt, row.eligible_at_ms) == (ExecutionStatus.BLOCKED, 2, None)


async def test_yield_returns_the_claim_to_pending_and_refunds_the_attempt(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    clock.advance(ms=50)
    released = await harness.store.release_preflight(
        claim.lease,
        mutation_id="yield-1",
        kind=states.ReleaseKind.YIELD,
        result_code="shutdown",
        retry_at_ms=None,
        now_ms=clock.now_ms(),
    )
    assert (released.outcome, released.status) == (Outcome.RELEASED, ExecutionStatus.PENDING)
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt, row.eligible_at_ms) == (
        ExecutionStatus.PENDING,
        0,
        clock.now_ms(),
    )
    again = await claim_one(harness, clock, "w2")
    assert again.lease is not None
    assert again.lease.attempt == 1


async def test_release_replay_by_mutation_id(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    lease = claim.lease
    assert lease is not None

    async def release(code: str, mutation: str = "rel-1") -> records.Transition:
        return await harness.store.release_preflight(
            lease,
            mutation_id=mutation,
            kind=states.ReleaseKind.BLOCKED,
            result_code=code,
            retry_at_ms=None,
            now_ms=clock.now_ms(),
        )

    first = await release("digest_drift")
    assert (first.outcome, first.status) == (Outcome.RELEASED, ExecutionStatus.BLOCKED)
    same = await release("digest_drift")
    assert (same.outcome, same.version) == (Outcome.EXISTING, first.version)
    other = await release("plan_invalid")
    assert (other.outcome, other.reason) == (Outcome.CONFLICT, "mutation_reused")
    fresh = await release("digest_drift", mutation="rel-2")
    assert (fresh.outcome, fresh.reason) == (Outcome.CONFLICT, "not_leased")


async def test_complete_replay_by_mutation_id(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)

    async def complete(
        completion: states.Completion, mutation: str = "done-1"
    ) -> records.Transition:
        return await harness.store.complete(
            identity,
            mutation_id=mutation,
            completion=completion,
            result_code="ok",
            now_ms=clock.now_ms(),
        )

    first = await complete(states.Completion.SUCCEEDED)
    assert (first.outcome, first.status) == (Outcome.COMPLETED, ExecutionStatus.SUCCEEDED)
    assert (await complete(states.Completion.SUCCEEDED)).outcome is Outcome.EXISTING
    other = await complete(states.Completion.FAILED)
    assert (other.outcome, other.reason) == (Outcome.CONFLICT, "mutation_reused")
    late = await complete(states.Completion.FAILED, mutation="done-2")
    assert (late.outcome, late.reason) == (Outcome.CONFLICT, "not_executing")
    row = await harness.store.get_execution(identity.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.SUCCEEDED


async def test_late_but_fenced_complete_after_lease_expiry_is_accepted(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    clock.advance(ms=LEASE_MS * 3)
    done = await harness.store.complete(
        identity,
        mutation_id="late",
        completion=states.Completion.FAILED,
        result_code="explicit_failure",
        now_ms=clock.now_ms(),
    )
    assert (done.outcome, done.status) == (Outcome.COMPLETED, ExecutionStatus.FAILED)


async def test_complete_accepts_a_renewed_version_but_not_another_identity(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    renewal = await harness.store.renew(
        identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert renewal.outcome is Outcome.RENEWED
    forged = records.ExecutionIdentity(
        dispatch_id=identity.dispatch_id,
        attempt=identity.attempt,
        owner=identity.owner,
        token=identity.token,
        started_at_ms=identity.started_at_ms + 1,
        version=identity.version,
        lease_expires_at_ms=identity.lease_expires_at_ms,
    )
    refused = await harness.store.complete(
        forged,
        mutation_id="forged",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert (refused.outcome, refused.reason) == (Outcome.CONFLICT, "identity_mismatch")
    done = await harness.store.complete(
        identity,
        mutation_id="real",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert done.outcome is Outcome.COMPLETED


async def test_events_use_the_database_clock_and_record_every_transition(
    harness: Harness, clock: ManualClock
) -> None:
    import time

    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    await harness.store.complete(
        identity,
        mutation_id="done",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    events = await harness.store.execution_events(consumed.dispatch_id)
    assert [e.to_status.value for e in events] == ["pending", "leased", "executing", "succeeded"]
    assert [e.version for e in events] == sorted({e.version for e in events})
    wall = time.time() * 1000
    for event in events:
        assert states.is_allowed(event.from_status, event.to_status)
        # the manual clock is weeks away from now: the ledger took the database clock
        assert abs(event.committed_at_ms - wall) < 60_000
