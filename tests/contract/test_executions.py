"""The execution contract (docs/state-machine.md) against every dialect's real store: consuming,
claiming and taking over (starts: `test_execution_starts`; releases and completions:
`test_execution_releases`).
"""

from __future__ import annotations

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import claim_one, start_request, started
from tests.support.stores import Harness


async def test_consume_creates_pending_execution_and_event(
    harness: Harness, clock: ManualClock
) -> None:
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
) -> None:
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


async def test_claim_due_respects_page_limit_and_eligibility(
    harness: Harness, clock: ManualClock
) -> None:
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
) -> None:
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


async def test_two_connections_race_for_one_due_dispatch(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    other = await harness.open_another()
    results: list[records.ClaimBatch] = []

    async def claim(store: ports.Store, owner: str) -> None:
        results.append(
            await store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=64, lease_ms=LEASE_MS)
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


async def test_same_owner_and_token_claim_replays_the_lease(
    harness: Harness, clock: ManualClock
) -> None:
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


async def test_expired_leased_is_taken_over_by_another_token(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    first = await claim_one(harness, clock, "w1")
    clock.advance(ms=LEASE_MS)
    second = await claim_one(harness, clock, "w2")
    assert second.lease is not None
    assert first.lease is not None
    assert second.lease.token != first.lease.token
    assert second.lease.attempt == 1  # the dead holder's attempt is refunded
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
) -> None:
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


async def test_repeated_takeovers_do_not_spend_the_budget(
    harness: Harness, clock: ManualClock
) -> None:
    # Two holders died before their barriers: a budget of 2 is still whole (the takeover
    # bound, tests/contract/test_takeover_budget.py, is what stops a poison pill).
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    await claim_one(harness, clock, "w1")
    clock.advance(ms=LEASE_MS)
    await claim_one(harness, clock, "w2")
    clock.advance(ms=LEASE_MS)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w3", limit=8, lease_ms=LEASE_MS
    )
    assert [c.outcome for c in batch.claims] == [Outcome.CLAIMED]
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt, row.takeovers) == (ExecutionStatus.LEASED, 1, 2)
