"""A crash at every point of the dispatcher: nothing lost, nothing run twice.

A "crash" is a BaseException from the test-only fault hook: the dispatcher that hit it writes
nothing more, exactly as a killed process would. A fresh dispatcher with a new owner and the
reconciler then run with the clock moved past the lease.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import records, recovery
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support import faults, page_crash, repositories
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.marker import MarkerAction, MarkerEvidence
from tests.support.stores import Harness


class SimulatedCrash(BaseException):
    """Stands for the process dying at a crash point."""


def crash_at(point: str) -> dispatcher.FaultHook:
    async def hook(where: str, dispatch: records.Dispatch) -> None:
        if where == point:
            raise SimulatedCrash(point)

    return hook


async def crash(the_dispatcher: dispatcher.Dispatcher) -> None:
    with pytest.raises(BaseException) as info:
        await the_dispatcher.dispatch_batch()
    error = info.value
    assert isinstance(error, SimulatedCrash) or (
        isinstance(error, BaseExceptionGroup) and error.subgroup(SimulatedCrash) is not None
    )


async def starts(harness: Harness, dispatch_id: str) -> int:
    """Start barriers and passages (a passage is a claim, a start and a completion at once)."""
    events = await harness.store.execution_events(dispatch_id)
    passage = (ExecutionStatus.PENDING, ExecutionStatus.SUCCEEDED)
    return sum(
        1
        for e in events
        if e.to_status is ExecutionStatus.EXECUTING or (e.from_status, e.to_status) == passage
    )


MARKER_POINTS = {
    "after_claim": "pre",
    "after_inspect": "pre",
    "after_start": "post_no_effect",
    "after_execute": "post_effect",
    "after_complete": "done",
}


@pytest.mark.parametrize("point", sorted(MARKER_POINTS))
async def test_separate_completion_action_crash_points(
    harness: Harness, clock: ManualClock, tmp_path: Path, point: str
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    action = MarkerAction(tmp_path)
    first = make_dispatcher(
        harness.store,
        clock,
        owner="w1",
        handlers={"run.create": action},
        fault_hook=crash_at(point),
    )
    await crash(first)
    clock.advance(ms=LEASE_MS + 1)
    fresh_store = await harness.open_another()
    second = make_dispatcher(fresh_store, clock, owner="w2", handlers={"run.create": action})
    await second.dispatch_batch()
    await reconciler.Reconciler(
        fresh_store, {"run.create": MarkerEvidence(tmp_path)}, clock
    ).reconcile_pass()

    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    marker = tmp_path / consumed.dispatch_id
    kind = MARKER_POINTS[point]
    if kind == "pre":
        assert action.executed == [(consumed.dispatch_id, "w2")]
        assert row.status is ExecutionStatus.SUCCEEDED
        assert (row.attempt, row.takeovers) == (1, 1)  # w1's crash refunded its attempt
    else:
        assert action.executed == (
            [] if kind == "post_no_effect" else [(consumed.dispatch_id, "w1")]
        )
    if kind == "post_no_effect":
        assert row.status is ExecutionStatus.EXECUTING  # recovery_required, never re-executed
        (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=8)
        assert snapshot.observation is not None
        assert snapshot.observation.outcome is recovery.ObservationOutcome.MISSING
    if kind == "post_effect":
        assert row.status is ExecutionStatus.SUCCEEDED
        resolution = await harness.store.get_resolution(consumed.dispatch_id)
        assert resolution is not None
        assert resolution.source is recovery.Source.EVIDENCE
    if kind == "done":
        assert row.status is ExecutionStatus.SUCCEEDED
        assert await harness.store.get_resolution(consumed.dispatch_id) is None
    assert await starts(harness, consumed.dispatch_id) == 1
    if marker.exists():
        assert marker.read_text().count("\n") == 1


RUN_CREATE_POINTS = {
    "after_claim": "pre",
    "after_inspect": "pre",
    "inside_page": "pre",  # in the page transaction, before its commit: nothing started
    "after_page": "succeeded",  # the page transaction had committed start, Run and completion
}
"""Crash points of run.create on the page path (one transaction for start, effect, complete),
which serves the rows a passage leaves to the claim."""

PASSAGE_RUN_CREATE_POINTS = {
    "inside_passage": "pre",  # in the passage, before its commit: nothing written at all
}
"""The passage: claim, start, effect and completion in one transaction."""

PER_ITEM_RUN_CREATE_POINTS = {
    "after_claim": "pre",
    "after_inspect": "pre",
    "after_start": "missing",
    "before_effect": "missing",
    "after_execute": "succeeded",  # the effect transaction had already completed it
}
"""The same on the per-item path, which serves every item the page transaction did not take."""


def _crash_inside(store: object, point: str, after: str) -> None:
    def crash() -> None:
        raise SimulatedCrash(point)

    page_crash.crash_inside(store, after=after, crash=crash)


POINTS = {
    "passage": PASSAGE_RUN_CREATE_POINTS,
    "page": RUN_CREATE_POINTS,
    "per_item": PER_ITEM_RUN_CREATE_POINTS,
}


@pytest.mark.parametrize(
    ("path", "point"), [(path, p) for path, points in POINTS.items() for p in sorted(points)]
)
async def test_run_create_crash_points(
    harness: Harness, clock: ManualClock, path: str, point: str
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    hook = crash_at(point)
    crashing = await harness.open_another()
    handler: ports.ApprovedActionHandler = run_create.RunCreateHandler(
        crashing, repositories.runs(crashing), clock, fault_hook=hook
    )
    if path == "per_item":
        handler = page_crash.PerItemOnly(handler)
    elif path == "page":
        handler = page_crash.PageOnly(
            run_create.RunCreateHandler(
                crashing, repositories.runs(crashing), clock, fault_hook=hook
            )
        )
    if point == "inside_page":
        _crash_inside(crashing, point, after="complete_page")
    if point == "inside_passage":
        _crash_inside(crashing, point, after="pass_rows")
    first = make_dispatcher(
        crashing, clock, owner="w1", handlers={"run.create": handler}, fault_hook=hook
    )
    await crash(first)
    clock.advance(ms=LEASE_MS + 1)
    fresh_store = await harness.open_another()
    await make_dispatcher(fresh_store, clock, owner="w2").dispatch_batch()
    await bootstrap.build_reconciler(fresh_store, clock).reconcile_pass()

    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    runs = int(await harness.scalar(f"SELECT count(*) AS n FROM {faults.table(harness, 'runs')}"))
    expected = POINTS[path][point]
    assert await starts(harness, consumed.dispatch_id) == 1
    if expected == "pre":
        assert row.status is ExecutionStatus.SUCCEEDED
        assert row.lease_owner == "w2"
        assert runs == 1
    elif expected == "missing":
        assert row.status is ExecutionStatus.EXECUTING
        assert runs == 0
        (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=8)
        assert snapshot.observation is not None
        assert snapshot.observation.outcome is recovery.ObservationOutcome.MISSING
    else:
        assert row.status is ExecutionStatus.SUCCEEDED
        assert row.lease_owner == "w1"
        assert runs == 1
    assert await harness.store.get_resolution(consumed.dispatch_id) is None
