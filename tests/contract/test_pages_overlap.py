"""Overlapping pages (decision 0056), on every dialect: a slow execute holds back no claim while
a slot is free, never more than `concurrency` run at once, a stop gives back what did not
start and waits for what did, and every outcome is counted once."""

from __future__ import annotations

import dataclasses

import anyio
import pytest
from prometheus_client import CollectorRegistry

from qinglong_dispatcher import clock as system_clock
from qinglong_dispatcher import ports
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import errors, records
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.lifecycle import daemon, http, metrics, systemd
from qinglong_dispatcher.recovery import reconciler
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness


@dataclasses.dataclass
class GatedHandler:
    """The first item it executes waits for `gate`; the others take `fast_s`. It notes the
    most executes ever in flight at once."""

    action_type: str = "run.create"
    fast_s: float = 0.005
    gate: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    slow_started: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    executed: list[str] = dataclasses.field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    slow_id: str | None = None
    reach: int = 0
    reached: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    """Set once `reach` items have begun to execute."""

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return ports.InspectResult(
            kind=ports.InspectKind.READY, action_digest=dispatch.action_digest
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        self.executed.append(ctx.dispatch.dispatch_id)
        if len(self.executed) >= self.reach:
            self.reached.set()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.slow_id is None:
                self.slow_id = ctx.dispatch.dispatch_id
                self.slow_started.set()
                await self.gate.wait()
            else:
                await anyio.sleep(self.fast_s)
        finally:
            self.in_flight -= 1
        return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code="test_done")


async def _statuses(harness: Harness, ids: list[str]) -> dict[str, ExecutionStatus]:
    rows = {i: await harness.store.get_execution(i) for i in ids}
    return {i: r.status for i, r in rows.items() if r is not None}


async def test_a_second_page_is_claimed_and_finished_while_a_slow_item_runs(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 4)
    ids = [c.dispatch_id for c in consumed]
    handler = GatedHandler()
    the_dispatcher = make_dispatcher(
        harness.store, clock, handlers={"run.create": handler}, concurrency=2
    )
    reports: list[dispatcher.BatchReport] = []
    async with the_dispatcher.overlapping() as slots:
        with anyio.fail_after(20):
            while True:
                reports.append(await the_dispatcher.dispatch_batch())
                statuses = await _statuses(harness, ids)
                done = [i for i, s in statuses.items() if s is ExecutionStatus.SUCCEEDED]
                if len(done) == 3:
                    break
        # Three items finished over several pages while the first one still runs.
        assert handler.slow_id is not None
        assert handler.slow_id not in done
        assert statuses[handler.slow_id] is ExecutionStatus.EXECUTING
        assert len(reports) >= 2
        handler.gate.set()
    left = slots.finished.take()
    assert (await _statuses(harness, ids)) == dict.fromkeys(ids, ExecutionStatus.SUCCEEDED)
    assert sorted(handler.executed) == sorted(ids)  # each once
    assert handler.most_in_flight <= 2
    assert slots.peak <= 2
    claimed = sum(r.claims["claimed"] for r in reports)
    succeeded = sum(r.outcomes["succeeded"] for r in reports)
    succeeded += sum(c["succeeded"] for c in left.values())
    assert (claimed, succeeded) == (4, 4)


async def test_never_more_than_concurrency_executes_in_flight_across_pages(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 12)
    ids = [c.dispatch_id for c in consumed]
    handler = GatedHandler(fast_s=0.02)
    the_dispatcher = make_dispatcher(
        harness.store, clock, handlers={"run.create": handler}, concurrency=3, page_size=64
    )
    reports: list[dispatcher.BatchReport] = []
    async with the_dispatcher.overlapping() as slots:
        with anyio.fail_after(20):
            await_gate = False
            while True:
                report = await the_dispatcher.dispatch_batch()
                reports.append(report)
                assert report.pages <= 3 / 64  # a claim never asks for more than the slots
                if not await_gate and len(handler.executed) >= 6:
                    handler.gate.set()  # the slow one ends in the middle of the others
                    await_gate = True
                if report.observed == 0 and handler.gate.is_set():
                    break
                if report.observed == 0:
                    await anyio.sleep(0.01)
    left = slots.finished.take()
    assert sorted(handler.executed) == sorted(ids)
    assert handler.most_in_flight == 3  # the limit is reached, never passed
    assert slots.peak == 3
    assert sum(r.claims["claimed"] for r in reports) == 12
    succeeded = sum(r.outcomes["succeeded"] for r in reports)
    assert succeeded + sum(c["succeeded"] for c in left.values()) == 12


async def test_claims_in_hand_when_the_drain_begins_go_back_at_once(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 2)
    ids = [c.dispatch_id for c in consumed]
    handler = GatedHandler()
    drained: list[str] = []

    async def drain_after_claim(point: str, dispatch: records.Dispatch) -> None:
        if point == "after_claim" and not drained:
            drained.append(dispatch.dispatch_id)
            the_dispatcher.drain()

    the_dispatcher = make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        concurrency=2,
        fault_hook=drain_after_claim,
    )
    async with the_dispatcher.overlapping() as slots:
        report = await the_dispatcher.dispatch_batch()
        assert report.claims["claimed"] == 2
    left = slots.finished.take()
    assert handler.executed == []
    assert dict(left["run.create"]) == {"pending": 2}
    for dispatch_id in ids:
        row = await harness.store.get_execution(dispatch_id)
        assert row is not None
        assert (row.status, row.attempt, row.result_code) == (
            ExecutionStatus.PENDING,
            0,
            "shutdown",
        )
    assert (await the_dispatcher.dispatch_batch()).claims == {}  # draining: nothing more


def _outcomes(registry: CollectorRegistry, outcome: str) -> float:
    value = registry.get_sample_value(
        "qinglong_dispatcher_outcomes_total", {"action_type": "run.create", "outcome": outcome}
    )
    return value or 0.0


async def test_the_daemon_stops_after_its_overlapping_items_and_counts_each_once(
    harness: Harness,
) -> None:
    the_clock = system_clock.SystemClock()
    consumed = await submit_runs(harness.approver_store, the_clock, 6)
    ids = [c.dispatch_id for c in consumed]
    settings = load_settings(
        environ={
            "QINGLONG_CADENCE_SECONDS": "0.05",
            "QINGLONG_LEASE_SECONDS": "2.4",
            "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "2.2",
            "QINGLONG_SHUTDOWN_GRACE_SECONDS": "10",
        }
    )
    handler = GatedHandler(reach=4)
    the_metrics = metrics.Metrics(profile="edge", cadence_s=0.05, process_metrics=False)
    the_dispatcher = dispatcher.Dispatcher(
        harness.store,
        {"run.create": handler},
        the_clock,
        dispatcher.DispatchConfig(
            owner="w1",
            page_size=16,
            lease_ms=2400,
            concurrency=2,
            retry_backoff_ms=1000,
            execute_timeout_ms=2200,
        ),
    )
    the_daemon = daemon.Daemon(
        daemon.Parts(
            settings=settings,
            store=harness.store,
            clock=the_clock,
            dispatcher=the_dispatcher,
            reconciler=reconciler.Reconciler(harness.store, {}, the_clock),
            metrics=the_metrics,
            health=http.Health(cadence_s=0.05),
            notifier=systemd.Notifier(environ={}),
        )
    )
    ended: list[str] = []

    async def run() -> None:
        assert await the_daemon.run() == 0
        ended.append("daemon")

    async def release_later() -> None:
        await anyio.sleep(1.0)  # past a lease renewal and many ticks' worth of the stop
        ended.append("slow item")
        handler.gate.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(20):
            await handler.slow_started.wait()
            # The other items go through the free slot while the slow one runs.
            await handler.reached.wait()
        the_daemon.request_stop()
        tg.start_soon(release_later)
    assert ended == ["slow item", "daemon"]  # the daemon left only after its item in flight
    assert len(handler.executed) == len(set(handler.executed))  # nothing executed twice
    statuses = await _statuses(harness, ids)
    for dispatch_id in ids:
        row = await harness.store.get_execution(dispatch_id)
        assert row is not None
        if dispatch_id in handler.executed:
            assert row.status is ExecutionStatus.SUCCEEDED
        else:  # never started: due now for any replica, its attempt refunded or unspent
            assert (row.status, row.attempt) == (ExecutionStatus.PENDING, 0), statuses
            assert row.eligible_at_ms is not None
            assert row.eligible_at_ms <= the_clock.now_ms()
    assert _outcomes(the_metrics.registry, "succeeded") == len(handler.executed)
    given_back = sum(1 for i in ids if statuses[i] is ExecutionStatus.PENDING)
    pending = _outcomes(the_metrics.registry, "pending")
    assert pending <= given_back  # a given-back claim is counted; an unclaimed row is not
    claimed = the_metrics.registry.get_sample_value(
        "qinglong_dispatcher_claims_total", {"result": "claimed"}
    )
    assert claimed == len(handler.executed) + pending


async def test_a_store_fault_an_item_meets_reaches_the_next_batch(
    harness: Harness, clock: ManualClock
) -> None:
    """A store fault that escapes an item in a slot stops neither the other slots nor passes
    unseen: the next batch raises it, so the tick handles it as it handled a page's."""
    consumed = await submit_runs(harness.approver_store, clock, 2)
    handler = GatedHandler()
    handler.gate.set()

    async def fault(point: str, dispatch: records.Dispatch) -> None:
        if point == "after_complete" and dispatch.dispatch_id == consumed[0].dispatch_id:
            raise errors.StoreFull("the disk is full", code="store_full")

    the_dispatcher = make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        concurrency=2,
        fault_hook=fault,
    )
    async with the_dispatcher.overlapping() as slots:
        await the_dispatcher.dispatch_batch()
        with anyio.fail_after(20):
            await slots.idle()
        with pytest.raises(errors.StoreFull):
            await the_dispatcher.dispatch_batch()
        await the_dispatcher.dispatch_batch()  # raised once, then batches go on
    assert sorted(handler.executed) == sorted(c.dispatch_id for c in consumed)
    statuses = await _statuses(harness, [c.dispatch_id for c in consumed])
    assert set(statuses.values()) == {ExecutionStatus.SUCCEEDED}
