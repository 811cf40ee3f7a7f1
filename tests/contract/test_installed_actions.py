"""An installed action through the real dispatcher, store and reconciler, on every dialect:
it dispatches like a built-in, it can never claim `committed`, and recovery asks its own
evidence provider (or leaves a manual-only action to an operator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.actions import registry
from qinglong_dispatcher.domain import plans, recovery
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import installed_actions
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.installed_actions import HERE, entry_points_in, write_distribution
from tests.support.recovery import started_execution
from tests.support.stores import Harness


@pytest.fixture
def installed(tmp_path: Path) -> registry.Installed:
    write_distribution(
        tmp_path, "qa-echo", {"test.echo": f"{HERE}:ECHO", "test.manual": f"{HERE}:MANUAL"}
    )
    return registry.load(entry_points_in(tmp_path))


async def _submit(
    harness: Harness,
    clock: ManualClock,
    installed: registry.Installed,
    answer: str,
    *,
    action_type: str = "test.echo",
) -> str:
    plan = plans.parse_plan(
        action_type,
        {"schemaVersion": 1, "actionRef": f"act-{answer}", "projectId": "p1", "answer": answer},
        models=installed.plan_models,
    )
    (consumed,) = await make_api(harness.approver_store, clock).submit(
        [plan], requested_by="tester", approved_by="approver"
    )
    return consumed.dispatch_id


async def _dispatch(harness: Harness, clock: ManualClock, installed: registry.Installed) -> None:
    store = harness.store
    handlers = {
        **bootstrap.handlers(store, clock),
        **installed.handlers(installed.context(store, clock)),
    }
    await make_dispatcher(store, clock, handlers=handlers).dispatch_batch()


async def test_an_installed_action_is_inspected_started_and_executed_once(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    dispatch_id = await _submit(harness, clock, installed, "succeeded")
    await _dispatch(harness, clock, installed)
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (ExecutionStatus.SUCCEEDED, "echoed")
    assert installed_actions.CALLS.executed.count(dispatch_id) == 1
    events = await harness.store.execution_events(dispatch_id)
    assert [e.to_status for e in events].count(ExecutionStatus.EXECUTING) == 1


async def test_an_installed_action_cannot_claim_committed(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    # Only the store's own transactional actions complete inside their effect; an installed
    # action answering `committed` would leave the row executing for an operator.
    dispatch_id = await _submit(harness, clock, installed, "committed")
    await _dispatch(harness, clock, installed)
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (
        ExecutionStatus.BLOCKED,
        "indeterminate:execute_invalid",
    )


async def test_a_code_that_is_not_an_identifier_is_replaced(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    dispatch_id = await _submit(harness, clock, installed, "odd_code")
    await _dispatch(harness, clock, installed)
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (ExecutionStatus.SUCCEEDED, registry.INVALID_CODE)


async def _reconcile(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> dict[str, int]:
    the_reconciler = bootstrap.build_reconciler(harness.store, clock, installed=installed)
    return dict((await the_reconciler.reconcile_pass()).outcomes)


async def test_recovery_asks_the_installed_evidence_provider(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    dispatch_id = await _submit(harness, clock, installed, "succeeded")
    await started_execution(harness, clock)  # a dispatcher that died after the barrier
    clock.advance(ms=LEASE_MS)
    assert await _reconcile(harness, clock, installed) == {"resolved_succeeded": 1}
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.SUCCEEDED
    assert dispatch_id not in installed_actions.CALLS.executed  # recovery never executes


async def test_verified_without_a_digest_is_unavailable_not_settled(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    dispatch_id = await _submit(harness, clock, installed, "unverifiable")
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    assert await _reconcile(harness, clock, installed) == {"unavailable": 1}
    (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=8)
    assert snapshot.dispatch.dispatch_id == dispatch_id
    assert snapshot.observation is not None
    assert snapshot.observation.reason_code == "evidence_invalid"


async def test_a_manual_only_action_waits_for_an_operator(
    harness: Harness, clock: ManualClock, installed: registry.Installed
) -> None:
    await _submit(harness, clock, installed, "succeeded", action_type="test.manual")
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    assert await _reconcile(harness, clock, installed) == {"missing": 1}
    (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=8)
    assert snapshot.observation is not None
    assert snapshot.observation.reason_code == recovery.MANUAL_ONLY
