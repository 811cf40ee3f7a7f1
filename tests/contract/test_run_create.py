"""`run.create`: Run + attempt + event + receipt + completion in one transaction."""

from __future__ import annotations

import dataclasses

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.domain import errors, runs
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import faults, repositories
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.recovery import request_for, started_execution
from tests.support.stores import Harness


async def count(harness: Harness, name: str) -> int:
    return int(await harness.scalar(f"SELECT count(*) AS n FROM {faults.table(harness, name)}"))


async def test_dispatching_creates_one_run_with_its_receipt_in_the_completion_commit(
    harness: Harness, clock: ManualClock
) -> None:
    repository = repositories.runs(harness.store)
    consumed = await submit_runs(harness.approver_store, clock, 3)
    report = await make_dispatcher(harness.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 3
    for c in consumed:
        receipt = await repository.get_receipt(c.dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        dispatch = await harness.store.get_dispatch(c.dispatch_id)
        assert dispatch is not None
        run = await repository.get_run_by_key(dispatch.project_id, c.dispatch_id)
        assert run is not None
        assert run.run_id == receipt.resource_id
        assert (run.status, run.trigger_type, run.execution_origin, run.execution_owner) == (
            runs.RunStatus.QUEUED,
            "approved_action",
            "system",
            "runtime",
        )
        assert run.request_id == dispatch.approval_request_id
        assert (run.version, run.event_seq) == (1, 1)
        events = await harness.store.execution_events(c.dispatch_id)
        # A passage: claim, start, effect and completion in one transaction, one line.
        assert [e.to_status.value for e in events] == ["pending", "succeeded"]
        assert run.accepted_at_ms == receipt.started_at_ms
        execution = await harness.store.get_execution(c.dispatch_id)
        assert execution is not None
        assert execution.result_code == runs.RESULT_CODE_RUN_CREATED
        assert receipt.execution_version == events[1].version  # the version the passage wrote
    assert await count(harness, "runs") == 3
    assert await count(harness, "run_attempts") == 3
    assert await count(harness, "run_events") == 3
    assert await count(harness, "approved_run_action_receipts") == 3


async def test_replay_returns_the_original_run_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    repository = repositories.runs(harness.store)
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    first = await repository.create_run(await request_for(harness, clock, dispatch, identity))
    assert first.outcome is ports.RunCreateOutcome.CREATED
    again = await repository.create_run(
        await request_for(harness, clock, dispatch, identity, run_id="r-2")
    )
    assert again.outcome is ports.RunCreateOutcome.EXISTING
    assert again.run is not None
    assert first.run is not None
    assert again.run.run_id == first.run.run_id
    assert await count(harness, "runs") == 1
    assert await count(harness, "approved_run_action_receipts") == 1
    events = await harness.store.execution_events(dispatch.dispatch_id)
    assert [e.to_status for e in events].count(ExecutionStatus.SUCCEEDED) == 1


async def test_an_idempotency_key_collision_without_receipt_is_a_stable_conflict(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    await harness.raw(
        f"INSERT INTO {faults.table(harness, 'runs')} (run_id, project_id, task_id, "
        "task_revision, executor_type, priority, status, trigger_type, execution_origin, "
        "execution_owner, request_id, idempotency_key, accepted_at_ms, version, event_seq, "
        "created_at_ms, updated_at_ms) VALUES ('r-squatter', 'proj-1', 'other', 1, 'shell', 0, "
        f"'queued', 'manual', 'user', 'user', NULL, '{consumed.dispatch_id}', 1, 1, 1, 1, 1)"
    )
    dispatch, identity = await started_execution(harness, clock)
    for run_id in ("r-1", "r-2"):
        result = await repositories.runs(harness.store).create_run(
            await request_for(harness, clock, dispatch, identity, run_id=run_id)
        )
        assert (result.outcome, result.reason) == (
            ports.RunCreateOutcome.CONFLICT,
            "idempotency_key_collision",
        )
    assert await count(harness, "runs") == 1
    assert await count(harness, "approved_run_action_receipts") == 0
    execution = await harness.store.get_execution(dispatch.dispatch_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.EXECUTING


async def test_the_dispatcher_fails_a_collided_dispatch_without_a_second_run(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    await harness.raw(
        f"INSERT INTO {faults.table(harness, 'runs')} (run_id, project_id, task_id, "
        "task_revision, executor_type, priority, status, trigger_type, execution_origin, "
        "execution_owner, request_id, idempotency_key, accepted_at_ms, version, event_seq, "
        "created_at_ms, updated_at_ms) VALUES ('r-squatter', 'proj-1', 'other', 1, 'shell', 0, "
        f"'queued', 'manual', 'user', 'user', NULL, '{consumed.dispatch_id}', 1, 1, 1, 1, 1)"
    )
    await make_dispatcher(harness.store, clock).dispatch_batch()
    execution = await harness.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.result_code) == (
        ExecutionStatus.FAILED,
        "idempotency_key_collision",
    )
    assert await count(harness, "runs") == 1


async def test_a_renewed_version_is_accepted_and_recorded_in_the_receipt(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    renewal = await harness.store.renew(
        identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert renewal.lease is not None
    result = await repositories.runs(harness.store).create_run(
        await request_for(harness, clock, dispatch, identity)
    )
    assert result.outcome is ports.RunCreateOutcome.CREATED
    assert result.receipt is not None
    assert result.receipt.execution_version == renewal.lease.version > identity.version


async def test_a_stale_handler_is_fenced_before_any_run_write(
    harness: Harness, clock: ManualClock
) -> None:
    repository = repositories.runs(harness.store)
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    from qinglong_dispatcher.domain import states

    done = await harness.store.complete(
        identity,
        mutation_id="other-completion",
        completion=states.Completion.FAILED,
        result_code="settled_elsewhere",
        now_ms=clock.now_ms(),
    )
    assert done.outcome is Outcome.COMPLETED
    result = await repository.create_run(await request_for(harness, clock, dispatch, identity))
    assert (result.outcome, result.reason) == (ports.RunCreateOutcome.FENCED, "not_executing")
    other = dataclasses.replace(identity, token="t-other")
    await submit_runs(harness.approver_store, clock, 1)
    dispatch2, identity2 = await started_execution(harness, clock)
    forged = dataclasses.replace(identity2, token=other.token)
    result2 = await repository.create_run(await request_for(harness, clock, dispatch2, forged))
    assert (result2.outcome, result2.reason) == (ports.RunCreateOutcome.FENCED, "identity_mismatch")
    assert await count(harness, "runs") == 0


@pytest.mark.parametrize(
    "table",
    ["run_attempts", "run_events", "approved_run_action_receipts", "execution_events"],
)
async def test_a_failure_anywhere_in_the_effect_rolls_back_every_fact(
    harness: Harness, clock: ManualClock, table: str
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    events_before = len(await harness.store.execution_events(dispatch.dispatch_id))
    await faults.fail_inserts_into(harness, table)
    with pytest.raises(errors.StoreError):
        await repositories.runs(harness.store).create_run(
            await request_for(harness, clock, dispatch, identity)
        )
    for name in ("runs", "run_attempts", "run_events", "approved_run_action_receipts"):
        assert await count(harness, name) == 0, name
    execution = await harness.store.get_execution(dispatch.dispatch_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.EXECUTING
    assert len(await harness.store.execution_events(dispatch.dispatch_id)) == events_before


async def test_inspect_resolves_the_plan_without_writing(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    dispatch = await harness.store.get_dispatch(consumed.dispatch_id)
    assert dispatch is not None
    handler = run_create.RunCreateHandler(harness.store, repositories.runs(harness.store), clock)
    result = await handler.inspect(dispatch)
    assert (result.kind, result.action_digest) == (
        ports.InspectKind.READY,
        dispatch.action_digest,
    )
    foreign = dataclasses.replace(dispatch, action_ref="act-unknown")
    missing = await handler.inspect(foreign)
    assert (missing.kind, missing.code) == (ports.InspectKind.BLOCKED, "plan_missing")
    assert await count(harness, "runs") == 0
