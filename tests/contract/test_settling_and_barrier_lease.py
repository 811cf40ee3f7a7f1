"""One clock for settling, the lease the start barrier grants, and the yield's mutation ids."""

from __future__ import annotations

import dataclasses
import time

import anyio
import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.clock import SystemClock
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import errors, fencing, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.handlers import RecordingHandler
from tests.support.recovery import manual_resolution, started_execution
from tests.support.stores import Harness


def wall_clock(offset_s: float = 0) -> ManualClock:
    """A manual clock standing at the real time (plus an offset): the database's clock agrees."""
    return ManualClock(int(time.time() * 1000 + offset_s * 1000))


# -- settling decides on the earlier of the caller's clock and the database's ---------------


async def test_the_store_refuses_to_resolve_a_live_lease(
    harness: Harness, clock: ManualClock
) -> None:
    """The lease-expiry condition of a resolution, asked of the store directly (no API check)."""
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    row = await harness.operator_store.get_execution(dispatch.dispatch_id)
    assert row is not None
    done = await harness.operator_store.resolve_recovery(
        manual_resolution(fencing.identity_of(row), row.project_id, states.Completion.FAILED),
        now_ms=clock.now_ms(),
    )
    assert (done.outcome, done.reason) == (Outcome.CONFLICT, "lease_live")
    after = await harness.store.get_execution(dispatch.dispatch_id)
    assert after is not None
    assert (after.status, after.version) == (ExecutionStatus.EXECUTING, identity.version)
    assert await harness.store.get_resolution(dispatch.dispatch_id) is None


async def test_an_operator_clock_a_minute_ahead_cannot_resolve_a_live_execution(
    harness: Harness,
) -> None:
    daemon_clock = wall_clock()
    await submit_runs(harness.approver_store, daemon_clock, 1)
    dispatch, _identity = await started_execution(harness, daemon_clock)
    operator_clock = wall_clock(offset_s=60)  # its lease (30 s) has "expired" by this clock
    with pytest.raises(errors.RecoveryRefused, match="by the database clock"):
        await api.resolve_manually(
            harness.operator_store,
            operator_clock,
            dispatch.dispatch_id,
            resolution=states.Completion.FAILED,
            operator="alice",
            reason="looked_stuck",
        )
    # Asked directly, the store refuses too: its transaction reads the database clock.
    row = await harness.operator_store.get_execution(dispatch.dispatch_id)
    assert row is not None
    done = await harness.operator_store.resolve_recovery(
        manual_resolution(fencing.identity_of(row), row.project_id, states.Completion.SUCCEEDED),
        now_ms=operator_clock.now_ms(),
    )
    assert (done.outcome, done.reason) == (Outcome.CONFLICT, "lease_live")
    after = await harness.store.get_execution(dispatch.dispatch_id)
    assert after is not None
    assert after.status is ExecutionStatus.EXECUTING
    assert await harness.store.audit_events(dispatch.dispatch_id) == []


async def test_a_reconciler_clock_ahead_neither_lists_nor_counts_a_live_execution(
    harness: Harness,
) -> None:
    daemon_clock = wall_clock()
    await submit_runs(harness.approver_store, daemon_clock, 1)
    await started_execution(harness, daemon_clock)
    ahead = wall_clock(offset_s=60)
    assert await harness.store.list_recovery_required(now_ms=ahead.now_ms(), limit=8) == []
    counts = await harness.store.counts(now_ms=ahead.now_ms())
    assert counts.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0
    assert counts.executions[EffectiveStatus.EXECUTING] == 1
    backlog = await harness.store.backlog(now_ms=ahead.now_ms())
    assert (backlog.executing, backlog.recovery_required) == (1, 0)
    report = await reconciler.Reconciler(harness.store, {}, ahead).reconcile_pass()
    assert report.observed == 0


async def test_when_both_clocks_agree_the_lease_expired_the_operator_settles(
    harness: Harness,
) -> None:
    # The positive twin of the tests above: a lease already past on the database's clock.
    past = wall_clock(offset_s=-(LEASE_MS / 1000 + 5))
    await submit_runs(harness.approver_store, past, 1)
    dispatch, _identity = await started_execution(harness, past)
    done = await api.resolve_manually(
        harness.operator_store,
        wall_clock(),
        dispatch.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="alice",
        reason="checked_downstream",
    )
    assert done.outcome is Outcome.COMPLETED


# -- the start barrier grants a lease --------------------------------------------------------


async def test_the_start_barrier_grants_a_fresh_lease(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=LEASE_MS
    )
    (claim,) = batch.claimed
    assert claim.lease is not None
    assert claim.dispatch is not None
    clock.advance(ms=LEASE_MS - 5)  # the claim's lease has 5 ms left
    (result,) = await harness.store.start(
        [
            records.StartRequest(
                lease=claim.lease,
                approval_request_id=claim.dispatch.approval_request_id,
                action_digest=claim.dispatch.action_digest,
            )
        ],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert result.outcome is Outcome.STARTED
    assert result.identity is not None
    assert result.identity.lease_expires_at_ms == clock.now_ms() + LEASE_MS
    row = await harness.store.get_execution(claim.dispatch_id)
    assert row is not None
    assert row.lease_expires_at_ms == clock.now_ms() + LEASE_MS
    clock.advance(ms=LEASE_MS - 1)
    assert row.effective_status(clock.now_ms()) is EffectiveStatus.EXECUTING


@dataclasses.dataclass
class WatchingHandler:
    """Executes for a fixed time while watching its own row as an operator would see it."""

    store: ports.Store
    execute_s: float
    action_type: str = "run.create"
    seen: list[tuple[str, EffectiveStatus]] = dataclasses.field(default_factory=list)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return ports.InspectResult(
            kind=ports.InspectKind.READY, action_digest=dispatch.action_digest
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        deadline = time.monotonic() + self.execute_s
        while True:
            row = await self.store.get_execution(ctx.dispatch.dispatch_id)
            assert row is not None
            seen_at = min(SystemClock().now_ms(), await self.store.database_now_ms())
            self.seen.append((ctx.dispatch.dispatch_id, row.effective_status(seen_at)))
            if time.monotonic() >= deadline:
                return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code="done")
            await anyio.sleep(self.execute_s / 6)


@pytest.mark.slow
async def test_a_slow_page_at_concurrency_one_never_reads_recovery_required(
    harness: Harness,
) -> None:
    lease_ms = 1_200
    clock = SystemClock()
    consumed = await submit_runs(harness.approver_store, clock, 16)
    handler = WatchingHandler(harness.store, execute_s=lease_ms / 4000)
    the_dispatcher = make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        page_size=16,
        concurrency=1,
        lease_ms=lease_ms,
    )
    report = await the_dispatcher.dispatch_batch()  # 16 × lease/4 = 4 leases of waiting
    assert report.outcomes == {"succeeded": 16}, report.outcomes
    assert {d for d, _ in handler.seen} == {c.dispatch_id for c in consumed}
    assert {status for _, status in handler.seen} == {EffectiveStatus.EXECUTING}
    for each in consumed:
        events = await harness.store.execution_events(each.dispatch_id)
        assert [(e.from_status, e.to_status) for e in events] == [
            (None, ExecutionStatus.PENDING),
            (ExecutionStatus.PENDING, ExecutionStatus.LEASED),
            (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING),
            (ExecutionStatus.EXECUTING, ExecutionStatus.SUCCEEDED),
        ]


# -- a yield refunds the attempt; the next claim's release must not collide with it ---------


class YieldOnInspect(RecordingHandler):
    """Begins shutdown from inside inspect, so the dispatcher yields the item it holds."""

    the_dispatcher: dispatcher.Dispatcher | None = None

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        assert self.the_dispatcher is not None
        self.the_dispatcher.drain()
        return await super().inspect(dispatch)


async def test_a_release_after_a_yield_and_a_new_claim_is_not_a_reused_mutation(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    yielding = YieldOnInspect()
    first = make_dispatcher(harness.store, clock, owner="w1", handlers={"run.create": yielding})
    yielding.the_dispatcher = first
    report = await first.dispatch_batch()
    assert report.outcomes == {"pending": 1}
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt) == (ExecutionStatus.PENDING, 0)

    # The next claim is attempt 1 again; its pre-barrier release must land, not collide.
    transient = RecordingHandler(inspect_kind=ports.InspectKind.TRANSIENT)
    second = make_dispatcher(harness.store, clock, owner="w2", handlers={"run.create": transient})
    report = await second.dispatch_batch()
    assert report.outcomes == {"retry_wait": 1}, report.outcomes
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt, row.lease_owner) == (ExecutionStatus.RETRY_WAIT, 1, "w2")
    events = await harness.store.execution_events(consumed.dispatch_id)
    assert [(e.to_status, e.attempt) for e in events] == [
        (ExecutionStatus.PENDING, 0),
        (ExecutionStatus.LEASED, 1),
        (ExecutionStatus.PENDING, 0),
        (ExecutionStatus.LEASED, 1),
        (ExecutionStatus.RETRY_WAIT, 1),
    ]
    assert len({e.mutation_id for e in events if e.mutation_id is not None}) == 2
