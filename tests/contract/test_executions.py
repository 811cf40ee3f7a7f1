"""The execution contract of DESIGN.md §3, run against every dialect's real store."""

from __future__ import annotations

import anyio
import pytest

from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

LEASE_MS = 30_000


async def claim_one(h: Harness, clock: ManualClock, owner: str = "w1") -> records.Claim:
    batch = await h.store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=1, lease_ms=LEASE_MS)
    assert len(batch.claimed) == 1, batch
    return batch.claimed[0]


def start_request(claim: records.Claim, **changes: object) -> records.StartRequest:
    assert claim.lease is not None
    assert claim.dispatch is not None
    fields: dict[str, object] = {
        "lease": claim.lease,
        "approval_request_id": claim.dispatch.approval_request_id,
        "action_digest": claim.dispatch.action_digest,
    }
    fields.update(changes)
    return records.StartRequest(**fields)  # type: ignore[arg-type]


async def started(h: Harness, clock: ManualClock, owner: str = "w1") -> records.ExecutionIdentity:
    claim = await claim_one(h, clock, owner)
    (result,) = await h.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert result.outcome is Outcome.STARTED
    assert result.identity is not None
    return result.identity


async def test_consume_creates_pending_execution_and_event(harness: Harness, clock: ManualClock):
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    execution = await harness.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.version, execution.attempt) == (
        ExecutionStatus.PENDING,
        0,
        0,
    )
    assert execution.eligible_at_ms == clock.now_ms()
    events = await harness.store.execution_events(consumed.dispatch_id)
    assert [(e.from_status, e.to_status) for e in events] == [(None, ExecutionStatus.PENDING)]


async def test_claim_due_leases_with_own_token_and_records_events(
    harness: Harness, clock: ManualClock
):
    await submit_runs(harness.approver_store, clock, 3)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=64, lease_ms=LEASE_MS
    )
    assert batch.observed == 3
    leases = [c.lease for c in batch.claimed]
    assert all(lease is not None for lease in leases)
    assert len({lease.token for lease in leases if lease}) == 3
    for claim in batch.claimed:
        assert claim.lease is not None
        assert (claim.lease.attempt, claim.lease.version) == (1, 1)
        assert claim.lease.expires_at_ms == clock.now_ms() + LEASE_MS
        row = await harness.store.get_execution(claim.dispatch_id)
        assert row is not None
        assert row.status is ExecutionStatus.LEASED
        assert row.eligible_at_ms == claim.lease.expires_at_ms
        events = await harness.store.execution_events(claim.dispatch_id)
        assert events[-1].to_status is ExecutionStatus.LEASED
        assert events[-1].lease_token == claim.lease.token
    again = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w2", limit=64, lease_ms=LEASE_MS
    )
    assert again.observed == 0


async def test_claim_due_respects_page_limit_and_eligibility(harness: Harness, clock: ManualClock):
    await submit_runs(harness.approver_store, clock, 5)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms() - 1, owner="w1", limit=64, lease_ms=LEASE_MS
    )
    assert batch.observed == 0
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=2, lease_ms=LEASE_MS
    )
    assert (batch.observed, len(batch.claimed)) == (2, 2)


async def test_keyset_paging_never_returns_executing_or_terminal(
    harness: Harness, clock: ManualClock
):
    consumed = await submit_runs(harness.approver_store, clock, 10)
    ids = {c.dispatch_id for c in consumed}
    identity = await started(harness, clock)  # one executing
    done = await started(harness, clock)  # one terminal
    result = await harness.store.complete(
        done,
        mutation_id="m-done",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert result.outcome is Outcome.COMPLETED
    clock.advance(ms=LEASE_MS + 1)  # the executing lease expires: still never due
    seen: list[str] = []
    after = None
    while True:
        page = await harness.store.list_due(now_ms=clock.now_ms(), limit=3, after=after)
        if not page:
            break
        assert len(page) <= 3
        seen.extend(row.dispatch_id for row in page)
        assert all(row.status in states.DUE_STATES for row in page)
        after = (page[-1].eligible_at_ms or 0, page[-1].dispatch_id)
    assert len(seen) == len(set(seen)) == 8
    assert set(seen) == ids - {identity.dispatch_id, done.dispatch_id}


async def test_two_connections_race_for_one_due_dispatch(harness: Harness, clock: ManualClock):
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    other = await harness.open_another()
    results: list[records.ClaimBatch] = []

    async def claim(store: object, owner: str) -> None:
        results.append(
            await store.claim_due(  # type: ignore[attr-defined]
                now_ms=clock.now_ms(), owner=owner, limit=64, lease_ms=LEASE_MS
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(claim, harness.store, "w1")
        tg.start_soon(claim, other, "w2")
    claimed = [c for batch in results for c in batch.claimed]
    assert len(claimed) == 1
    loser = "w2" if claimed[0].lease and claimed[0].lease.owner == "w1" else "w1"
    loser_store = other if loser == "w2" else harness.store
    seen = await loser_store.claim(
        consumed.dispatch_id, now_ms=clock.now_ms(), owner=loser, token="t-x", lease_ms=LEASE_MS
    )
    assert seen.outcome is Outcome.LIVE_LEASE
    events = await harness.store.execution_events(consumed.dispatch_id)
    assert [e.to_status for e in events].count(ExecutionStatus.LEASED) == 1


async def test_same_owner_and_token_claim_replays_the_lease(harness: Harness, clock: ManualClock):
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    first = await harness.store.claim(
        consumed.dispatch_id, now_ms=clock.now_ms(), owner="w1", token="tok-1", lease_ms=LEASE_MS
    )
    assert first.outcome is Outcome.CLAIMED
    clock.advance(ms=10)
    again = await harness.store.claim(
        consumed.dispatch_id, now_ms=clock.now_ms(), owner="w1", token="tok-1", lease_ms=LEASE_MS
    )
    assert again.outcome is Outcome.REPLAYED
    assert again.lease == first.lease
    other = await harness.store.claim(
        consumed.dispatch_id, now_ms=clock.now_ms(), owner="w2", token="tok-2", lease_ms=LEASE_MS
    )
    assert other.outcome is Outcome.LIVE_LEASE
    missing = await harness.store.claim(
        "d-missing", now_ms=clock.now_ms(), owner="w1", token="tok-1", lease_ms=LEASE_MS
    )
    assert missing.outcome is Outcome.NOT_FOUND


async def test_expired_leased_is_taken_over_by_another_token(harness: Harness, clock: ManualClock):
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    first = await claim_one(harness, clock, "w1")
    clock.advance(ms=LEASE_MS)
    second = await claim_one(harness, clock, "w2")
    assert second.lease is not None
    assert first.lease is not None
    assert second.lease.token != first.lease.token
    assert second.lease.attempt == 2
    (stale,) = await harness.store.start(
        [start_request(first)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert (stale.outcome, stale.reason) == (Outcome.CONFLICT, "lease_lost")
    (fresh,) = await harness.store.start(
        [start_request(second)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert fresh.outcome is Outcome.STARTED
    events = await harness.store.execution_events(consumed.dispatch_id)
    assert [(e.from_status, e.to_status) for e in events][1:] == [
        (ExecutionStatus.PENDING, ExecutionStatus.LEASED),
        (ExecutionStatus.LEASED, ExecutionStatus.LEASED),
        (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING),
    ]


async def test_expired_executing_is_never_claimable_and_counts_as_recovery_required(
    harness: Harness, clock: ManualClock
):
    await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    before = await harness.store.counts(now_ms=clock.now_ms())
    assert before.executions[EffectiveStatus.EXECUTING] == 1
    assert before.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0
    clock.advance(ms=LEASE_MS * 10)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w2", limit=64, lease_ms=LEASE_MS
    )
    assert batch.observed == 0
    claim = await harness.store.claim(
        identity.dispatch_id, now_ms=clock.now_ms(), owner="w2", token="t2", lease_ms=LEASE_MS
    )
    assert (claim.outcome, claim.reason) == (Outcome.NOT_CLAIMABLE, "started")
    after = await harness.store.counts(now_ms=clock.now_ms())
    assert after.executions[EffectiveStatus.EXECUTING] == 0
    assert after.executions[EffectiveStatus.RECOVERY_REQUIRED] == 1
    renewal = await harness.store.renew(
        identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert renewal.outcome is Outcome.EXPIRED
    row = await harness.store.get_execution(identity.dispatch_id)
    assert row is not None
    assert row.effective_status(clock.now_ms()) is EffectiveStatus.RECOVERY_REQUIRED


@pytest.mark.parametrize(
    ("change", "outcome", "reason"),
    [
        ({"approval_request_id": "a-other"}, Outcome.CONFLICT, "approval_mismatch"),
        ({"action_digest": "0" * 64}, Outcome.CONFLICT, "digest_mismatch"),
        ({"owner": "w-other"}, Outcome.CONFLICT, "lease_lost"),
        ({"token": "t-other"}, Outcome.CONFLICT, "lease_lost"),
        ({"version": 7}, Outcome.CONFLICT, "stale_version"),
    ],
)
async def test_start_rejects_a_wrong_binding_or_fence(
    harness: Harness, clock: ManualClock, change: dict[str, object], outcome: Outcome, reason: str
):
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    lease_fields = {k: v for k, v in change.items() if k in ("owner", "token", "version")}
    other = {k: v for k, v in change.items() if k not in lease_fields}
    lease = records.Lease(**{**_lease_dict(claim.lease), **lease_fields})  # type: ignore[arg-type]
    (result,) = await harness.store.start(
        [start_request(claim, lease=lease, **other)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert (result.outcome, result.reason) == (outcome, reason)
    row = await harness.store.get_execution(claim.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.LEASED


def _lease_dict(lease: records.Lease) -> dict[str, object]:
    return {
        "dispatch_id": lease.dispatch_id,
        "attempt": lease.attempt,
        "owner": lease.owner,
        "token": lease.token,
        "version": lease.version,
        "expires_at_ms": lease.expires_at_ms,
    }


async def test_start_rejects_an_expired_lease(harness: Harness, clock: ManualClock):
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    clock.advance(ms=LEASE_MS)
    (result,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert (result.outcome, result.reason) == (Outcome.EXPIRED, "lease_expired")


async def test_start_replays_an_unacknowledged_barrier_under_the_same_fence(
    harness: Harness, clock: ManualClock
):
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    (first,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    clock.advance(ms=5)
    (again,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert first.outcome is Outcome.STARTED
    assert again.outcome is Outcome.REPLAYED
    assert again.identity == first.identity
    events = await harness.store.execution_events(claim.dispatch_id)
    assert [e.to_status for e in events].count(ExecutionStatus.EXECUTING) == 1


async def test_start_takes_several_items_with_per_item_results(
    harness: Harness, clock: ManualClock
):
    await submit_runs(harness.approver_store, clock, 3)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=3, lease_ms=LEASE_MS
    )
    good, bad, good2 = batch.claimed
    results = await harness.store.start(
        [start_request(good), start_request(bad, action_digest="f" * 64), start_request(good2)],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert [r.outcome for r in results] == [Outcome.STARTED, Outcome.CONFLICT, Outcome.STARTED]
    assert [r.dispatch_id for r in results] == [
        good.dispatch_id,
        bad.dispatch_id,
        good2.dispatch_id,
    ]


async def test_renew_needs_the_exact_unexpired_fence(harness: Harness, clock: ManualClock):
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    clock.advance(ms=1000)
    renewal = await harness.store.renew(claim.lease, now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert renewal.outcome is Outcome.RENEWED
    assert renewal.lease is not None
    assert renewal.lease.version == claim.lease.version + 1
    assert renewal.lease.expires_at_ms == clock.now_ms() + LEASE_MS
    stale = await harness.store.renew(claim.lease, now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert (stale.outcome, stale.reason) == (Outcome.CONFLICT, "stale_version")
    row = await harness.store.get_execution(claim.dispatch_id)
    assert row is not None
    assert row.eligible_at_ms == renewal.lease.expires_at_ms
    events = await harness.store.execution_events(claim.dispatch_id)
    assert len(events) == 2  # a renew changes no status and writes no event


async def test_attempt_budget_ends_in_blocked(harness: Harness, clock: ManualClock):
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


async def test_repeated_takeovers_exhaust_the_budget(harness: Harness, clock: ManualClock):
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    await claim_one(harness, clock, "w1")
    clock.advance(ms=LEASE_MS)
    await claim_one(harness, clock, "w2")
    clock.advance(ms=LEASE_MS)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w3", limit=8, lease_ms=LEASE_MS
    )
    assert [c.outcome for c in batch.claims] == [Outcome.EXHAUSTED]
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (ExecutionStatus.BLOCKED, "attempts_exhausted")


async def test_yield_returns_the_claim_to_pending_and_refunds_the_attempt(
    harness: Harness, clock: ManualClock
):
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


async def test_release_replay_by_mutation_id(harness: Harness, clock: ManualClock):
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None

    async def release(code: str, mutation: str = "rel-1") -> records.Transition:
        return await harness.store.release_preflight(
            claim.lease,  # type: ignore[arg-type]
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


async def test_complete_replay_by_mutation_id(harness: Harness, clock: ManualClock):
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
):
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
):
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
):
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
