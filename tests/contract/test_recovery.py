"""Recovery store operations and the reconciler, on every dialect (docs/operations.md)."""

from __future__ import annotations

import anyio
import pytest

from qinglong_dispatcher import api, bootstrap
from qinglong_dispatcher.domain import errors, records, recovery, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import manual_resolution, plant_run_and_receipt, started_execution
from tests.support.stores import Harness


async def test_list_recovery_required_pages_only_expired_executing_rows(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 5)
    started = [await started_execution(harness, clock) for _ in range(3)]
    assert await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=64) == []
    clock.advance(ms=LEASE_MS)
    seen: list[str] = []
    after = None
    while page := await harness.store.list_recovery_required(
        now_ms=clock.now_ms(), limit=2, after=after
    ):
        seen.extend(s.dispatch.dispatch_id for s in page)
        after = (page[-1].since_ms, page[-1].dispatch.dispatch_id)
    assert sorted(seen) == sorted(d.dispatch_id for d, _ in started)


async def test_manual_resolution_is_fenced_audited_and_final(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    with pytest.raises(errors.RecoveryRefused):
        await api.resolve_manually(
            harness.operator_store,
            clock,
            dispatch.dispatch_id,
            resolution=states.Completion.FAILED,
            operator="oncall-1",
            reason="checked",
        )
    clock.advance(ms=LEASE_MS)
    await api.resolve_manually(
        harness.operator_store,
        clock,
        dispatch.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="oncall-1",
        reason="checked_downstream",
    )
    row = await harness.store.get_execution(dispatch.dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (ExecutionStatus.FAILED, "checked_downstream")
    stored = await harness.store.get_resolution(dispatch.dispatch_id)
    assert stored is not None
    assert (stored.source, stored.resolution, stored.resolved_by) == (
        recovery.Source.MANUAL,
        states.Completion.FAILED,
        "oncall-1",
    )
    assert stored.principal  # the authenticated principal, beside the operator's name
    audit = await harness.store.audit_events(dispatch.dispatch_id)
    assert [(a.kind, a.actor, a.principal) for a in audit] == [
        (recovery.AUDIT_MANUAL_RESOLUTION, "oncall-1", stored.principal)
    ]
    events = await harness.store.execution_events(dispatch.dispatch_id)
    assert (events[-1].from_status, events[-1].to_status) == (
        ExecutionStatus.EXECUTING,
        ExecutionStatus.FAILED,
    )
    with pytest.raises(errors.RecoveryRefused):
        await api.resolve_manually(
            harness.operator_store,
            clock,
            dispatch.dispatch_id,
            resolution=states.Completion.SUCCEEDED,
            operator="oncall-2",
            reason="again",
        )
    late = await harness.store.complete(
        identity,
        mutation_id="late",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert (late.outcome, late.reason) == (Outcome.CONFLICT, "not_executing")


async def test_a_late_complete_committed_first_wins_over_the_resolution(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=64)
    done = await harness.store.complete(
        identity,
        mutation_id="late",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert done.outcome is Outcome.COMPLETED
    lost = await harness.operator_store.resolve_recovery(
        manual_resolution(snapshot.fence, dispatch.project_id), now_ms=clock.now_ms()
    )
    assert (lost.outcome, lost.reason) == (Outcome.CONFLICT, "not_recovery_required")
    assert await harness.store.get_resolution(dispatch.dispatch_id) is None


async def test_late_complete_and_resolution_race_from_two_connections(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 8)
    pairs = [await started_execution(harness, clock) for _ in range(8)]
    clock.advance(ms=LEASE_MS)
    other = await harness.open_operator()
    results: dict[str, tuple[Outcome, Outcome]] = {}

    async def race(dispatch_id: str, identity: records.ExecutionIdentity) -> None:
        outcomes: dict[str, Outcome] = {}

        async def complete() -> None:
            done = await harness.store.complete(
                identity,
                mutation_id="late",
                completion=states.Completion.SUCCEEDED,
                result_code="late_ok",
                now_ms=clock.now_ms(),
            )
            outcomes["complete"] = done.outcome

        async def resolve() -> None:
            done = await other.resolve_recovery(
                manual_resolution(identity, "proj-1", states.Completion.BLOCKED),
                now_ms=clock.now_ms(),
            )
            outcomes["resolve"] = done.outcome

        async with anyio.create_task_group() as tg:
            tg.start_soon(complete)
            tg.start_soon(resolve)
        results[dispatch_id] = (outcomes["complete"], outcomes["resolve"])

    async with anyio.create_task_group() as tg:
        for dispatch, identity in pairs:
            tg.start_soon(race, dispatch.dispatch_id, identity)
    for dispatch_id, (completed, resolved) in results.items():
        assert sorted([completed, resolved]) == sorted([Outcome.COMPLETED, Outcome.CONFLICT])
        row = await harness.store.get_execution(dispatch_id)
        assert row is not None
        resolution = await harness.store.get_resolution(dispatch_id)
        if completed is Outcome.COMPLETED:
            assert row.status is ExecutionStatus.SUCCEEDED
            assert resolution is None
        else:
            assert row.status is ExecutionStatus.BLOCKED
            assert resolution is not None
        events = await harness.store.execution_events(dispatch_id)
        assert [e.from_status for e in events].count(ExecutionStatus.EXECUTING) == 1


async def test_reconciler_settles_verified_evidence_and_observes_the_rest(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 2)
    with_receipt = await started_execution(harness, clock)
    without = await started_execution(harness, clock)
    receipt = await plant_run_and_receipt(harness, clock, *with_receipt)
    clock.advance(ms=LEASE_MS)
    the_reconciler = bootstrap.build_reconciler(harness.store, clock)
    report = await the_reconciler.reconcile_pass()
    assert report.observed == 2
    assert report.outcomes == {"resolved_succeeded": 1, "missing": 1}
    settled = await harness.store.get_execution(with_receipt[0].dispatch_id)
    assert settled is not None
    assert settled.status is ExecutionStatus.SUCCEEDED
    resolution = await harness.store.get_resolution(with_receipt[0].dispatch_id)
    assert resolution is not None
    assert (resolution.source, resolution.evidence_digest) == (
        recovery.Source.EVIDENCE,
        receipt.evidence_digest,
    )
    assert await harness.store.audit_events(with_receipt[0].dispatch_id) == []
    clock.advance(ms=1000)
    again = await the_reconciler.reconcile_pass()
    assert again.outcomes == {"missing": 1}
    (stuck,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=64)
    assert stuck.dispatch.dispatch_id == without[0].dispatch_id
    assert stuck.observation is not None
    assert (stuck.observation.outcome, stuck.observation.count) == (
        recovery.ObservationOutcome.MISSING,
        2,
    )
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.executions[EffectiveStatus.RECOVERY_REQUIRED] == 1


class _Unavailable:
    action_type = "run.create"

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        raise errors.StoreUnavailable()


async def test_reconciler_records_unavailable_and_manual_only(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, _ = await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    failing = reconciler.Reconciler(harness.store, {"run.create": _Unavailable()}, clock)
    assert (await failing.reconcile_pass()).outcomes == {"unavailable": 1}
    (snap,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=1)
    assert snap.observation is not None
    assert (snap.observation.outcome, snap.observation.reason_code) == (
        recovery.ObservationOutcome.UNAVAILABLE,
        "store_unavailable",
    )
    none = reconciler.Reconciler(harness.store, {}, clock)
    assert (await none.reconcile_pass()).outcomes == {"missing": 1}
    (snap,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=1)
    assert snap.observation is not None
    assert snap.observation.reason_code == recovery.MANUAL_ONLY
    assert snap.observation.count == 2
    row = await harness.store.get_execution(dispatch.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.EXECUTING


async def test_reconciler_pages_past_stuck_rows(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 5)
    for _ in range(5):
        await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    the_reconciler = reconciler.Reconciler(harness.store, {}, clock, page_size=2)
    observed = [(await the_reconciler.reconcile_pass()).observed for _ in range(4)]
    assert observed == [2, 2, 1, 2]
