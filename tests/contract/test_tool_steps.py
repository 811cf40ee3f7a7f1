"""Tool StepRuns: created under a live Run, settled with their dispatch, never re-armed by us."""

from __future__ import annotations

import dataclasses

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import errors, states
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, repositories, tools
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.stores import Harness

Status = steps.StepRunStatus


def _binding(run_id: str, project: str, step_id: str = "s-1") -> steps.Binding:
    definition = tool_registry.FILE_WRITE_V1
    return steps.Binding(
        step_run_id=step_id,
        run_id=run_id,
        project_id=project,
        tool_id=definition.tool_id,
        tool_version=definition.version,
        definition_digest=definition.digest,
        action_type="tool.invoke",
        action_ref="act-1",
        action_digest="a" * 64,
        approval_request_id=None,
    )


async def count(h: Harness, table: str) -> int:
    return int(await h.scalar(f"SELECT count(*) AS n FROM {faults.table(h, table)}"))


async def test_a_step_run_is_created_only_under_a_queued_or_running_run_of_its_project(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    created = await tool_steps.create_step_run(
        steps.NewStepRun(binding=_binding(run.run_id, run.project_id), status=Status.READY),
        now_ms=clock.now_ms(),
    )
    assert (created.status, created.version, created.result_code) == (Status.READY, 1, None)
    assert await tool_steps.get_step_run("s-1") == created
    with pytest.raises(errors.StepRunRefused, match="not found"):
        await tool_steps.create_step_run(
            steps.NewStepRun(
                binding=_binding("r-missing", run.project_id, "s-2"), status=Status.READY
            ),
            now_ms=clock.now_ms(),
        )
    with pytest.raises(errors.StepRunRefused, match="not found"):
        await tool_steps.create_step_run(
            steps.NewStepRun(
                binding=_binding(run.run_id, "other-project", "s-3"), status=Status.READY
            ),
            now_ms=clock.now_ms(),
        )
    await harness.raw(
        f"UPDATE {faults.table(harness, 'runs')} SET status = 'failed' "
        f"WHERE run_id = '{run.run_id}'"
    )
    with pytest.raises(errors.StepRunRefused, match="is failed"):
        await tool_steps.create_step_run(
            steps.NewStepRun(
                binding=_binding(run.run_id, run.project_id, "s-4"), status=Status.READY
            ),
            now_ms=clock.now_ms(),
        )
    with pytest.raises(errors.InvalidInput):
        steps.NewStepRun(binding=_binding(run.run_id, run.project_id), status=Status.RUNNING)
    with pytest.raises(errors.InvalidInput):  # waiting_approval needs its approval
        steps.NewStepRun(
            binding=_binding(run.run_id, run.project_id), status=Status.WAITING_APPROVAL
        )
    assert await count(harness, "step_runs") == 1


async def test_submitting_a_tool_step_is_one_transaction_all_or_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(harness, clock)
    before = {t: await count(harness, t) for t in ("action_plans", "approval_requests")}
    with pytest.raises(errors.StepRunRefused):
        await tools.submit_tool(harness, clock, dataclasses.replace(run, run_id="r-missing"))
    assert {t: await count(harness, t) for t in before} == before
    assert await count(harness, "step_runs") == 0
    submitted = await tools.submit_tool(harness, clock, run)
    step = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status is Status.WAITING_APPROVAL
    assert step.binding.approval_request_id == submitted.consumed.approval_request_id
    approval = await harness.store.get_approval(submitted.consumed.approval_request_id)
    assert approval is not None
    assert approval.status.value == "consumed"
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.step_runs == {s.value: int(s is Status.WAITING_APPROVAL) for s in Status}


async def test_the_adapter_result_settles_the_step_run_and_the_execution_together(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    assert (await tool_steps.prepare(started.command())).outcome is ports.StartOutcome.CREATED
    request = ports.ToolStepCompletion(
        dispatch=started.dispatch,
        identity=started.identity,
        step_run_id=started.step.step_run_id,
        completion=states.Completion.SUCCEEDED,
        result_code="file_written",
        now_ms=clock.now_ms(),
    )
    done = await tool_steps.complete_tool_step(request)
    assert (done.outcome, done.step_status) == (
        ports.ToolStepOutcome.COMPLETED,
        Status.SUCCEEDED,
    )
    again = await tool_steps.complete_tool_step(request)
    assert again.outcome is ports.ToolStepOutcome.EXISTING
    ledger = await tool_steps.step_run_mutations(started.step.step_run_id)
    assert [(m.from_status, m.to_status, m.to_version) for m in ledger] == [
        (Status.WAITING_APPROVAL, Status.RUNNING, 2),
        (Status.RUNNING, Status.SUCCEEDED, 3),
    ]
    events = await harness.raw(
        f"SELECT seq, event_type, run_version FROM {faults.table(harness, 'run_events')} "
        f"WHERE run_id = '{run.run_id}' ORDER BY seq"
    )
    assert [(e["event_type"], e["run_version"]) for e in events] == [
        ("run.created", 1),
        ("step.started", 2),
        ("step.succeeded", 3),
    ]
    execution = await harness.store.get_execution(started.dispatch.dispatch_id)
    assert execution is not None
    assert (execution.status.value, execution.result_code) == ("succeeded", "file_written")


async def test_a_fenced_completion_changes_neither_the_step_run_nor_the_execution(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    await tool_steps.prepare(started.command())
    forged = dataclasses.replace(started.identity, token="forged")
    done = await tool_steps.complete_tool_step(
        ports.ToolStepCompletion(
            dispatch=started.dispatch,
            identity=forged,
            step_run_id=started.step.step_run_id,
            completion=states.Completion.FAILED,
            result_code="file_write_failed",
            now_ms=clock.now_ms(),
        )
    )
    assert done.outcome is ports.ToolStepOutcome.FENCED
    step = await tool_steps.get_step_run(started.step.step_run_id)
    assert step is not None
    assert (step.status, step.version) == (Status.RUNNING, 2)


@pytest.mark.parametrize("prepared", [True, False], ids=["started", "never_started"])
async def test_a_manual_failed_resolution_fails_the_step_run_in_its_transaction(
    harness: Harness, clock: ManualClock, prepared: bool
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    if prepared:
        await tool_steps.prepare(started.command())
    clock.advance(ms=LEASE_MS)
    done = await api.resolve_manually(
        harness.operator_store,
        clock,
        started.dispatch.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="oncall-1",
        reason="checked_sandbox",
    )
    assert done.status is states.ExecutionStatus.FAILED
    step = await tool_steps.get_step_run(started.step.step_run_id)
    assert step is not None
    assert (step.status, step.result_code) == (Status.FAILED, "checked_sandbox")
    ledger = await tool_steps.step_run_mutations(started.step.step_run_id)
    assert ledger[-1].from_status is (Status.RUNNING if prepared else Status.WAITING_APPROVAL)


async def test_a_blocked_resolution_marks_a_started_step_run_lost_and_nothing_rearms_it(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    await tool_steps.prepare(started.command())
    clock.advance(ms=LEASE_MS)
    await api.resolve_manually(
        harness.operator_store,
        clock,
        started.dispatch.dispatch_id,
        resolution=states.Completion.BLOCKED,
        operator="oncall-1",
        reason="unknown_outcome",
    )
    step = await tool_steps.get_step_run(started.step.step_run_id)
    assert step is not None
    assert step.status is Status.LOST
    assert (Status.LOST, Status.READY) not in steps.ALLOWED_TRANSITIONS
