"""The tool execution start barrier: one transaction, exact replay, fail closed."""

from __future__ import annotations

import time

import anyio
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.domain import digests, errors
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, repositories, tools
from tests.support.clock import ManualClock
from tests.support.stores import Harness

Outcome = ports.StartOutcome


async def test_prepare_commits_every_fact_and_both_entry_points_return_the_barrier(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    before = await tools.fact_counts(harness)
    command = started.command()
    result = await tool_steps.prepare(command)
    assert result.outcome is Outcome.CREATED
    assert result.barrier is not None
    barrier = result.barrier.barrier
    after = await tools.fact_counts(harness)
    assert {k: after[k] - before[k] for k in after} == {
        "security_audit_events": 1,
        "trace_anchors": 1,
        "audit_receipts": 1,
        "step_runs": 0,
        "step_run_mutations": 1,
        "run_events": 1,
        "tool_execution_start_barriers": 1,
    }
    assert await tools.positions(harness, run.run_id, started.step.step_run_id) == (
        run.version + 1,
        run.event_seq + 1,
        "running",
        2,
    )
    assert (barrier.start_id, barrier.command_digest) == (command.start_id, command.digest)
    assert (barrier.started_step_run_version, barrier.run_event_seq) == (2, run.event_seq + 1)
    assert barrier.dispatch_id == started.dispatch.dispatch_id
    assert barrier.snapshot_digest == tool_registry.snapshot_digest()
    by_start = await tool_steps.get_by_start_id(command.start_id)
    by_version = await tool_steps.get_by_started_step_run_version(
        run.run_id, started.step.step_run_id, 2
    )
    assert by_start == by_version == result.barrier
    assert await tool_steps.get_by_start_id("ts-nothing") is None
    assert await tool_steps.get_by_started_step_run_version(run.run_id, "s-x", 2) is None
    (mutation,) = await tool_steps.step_run_mutations(started.step.step_run_id)
    assert (mutation.from_status, mutation.to_status) == (
        steps.StepRunStatus.WAITING_APPROVAL,
        steps.StepRunStatus.RUNNING,
    )
    assert mutation.mutation_digest == barrier.mutation_digest
    (audit,) = [
        e
        for e in await harness.store.audit_events(started.step.step_run_id)
        if e.kind == tool_registry.AUDIT_KIND_TOOL_START
    ]
    assert audit.actor == started.dispatch.approved_by
    assert audit.detail_code == "builtin.file.write:v1"


async def test_committed_at_is_the_database_clock_not_the_callers(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    clock.advance(s=86_400 * 365)  # the caller's clock is a year ahead: it must not matter
    before = int(time.time() * 1000)
    result = await tool_steps.prepare(started.command())
    after = int(time.time() * 1000)
    assert result.barrier is not None
    committed = result.barrier.barrier.committed_at_ms
    assert before - 1000 <= committed <= after + 1000
    (mutation,) = await tool_steps.step_run_mutations(started.step.step_run_id)
    assert mutation.committed_at_ms == committed


async def test_an_exact_replay_is_existing_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    first = await tool_steps.prepare(started.command())
    counts = await tools.fact_counts(harness)
    position = await tools.positions(harness, run.run_id, started.step.step_run_id)
    again = await tool_steps.prepare(started.command())
    assert again.outcome is Outcome.EXISTING
    assert again.barrier == first.barrier
    assert await tools.fact_counts(harness) == counts
    assert await tools.positions(harness, run.run_id, started.step.step_run_id) == position


async def test_content_drift_under_the_same_identity_is_a_semantic_conflict(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    await tool_steps.prepare(started.command())
    counts = await tools.fact_counts(harness)
    drifted = started.command(policy=tool_registry.ToolPolicy(sandbox_root="/elsewhere"))
    assert drifted.start_id == started.command().start_id
    result = await tool_steps.prepare(drifted)
    assert (result.outcome, result.reason) == (Outcome.CONFLICT, "start_id_reused")
    # Another start id for the StepRun version already started: the version is taken.
    other = await tool_steps.prepare(started.command(key="another-start"))
    assert (other.outcome, other.reason) == (Outcome.CONFLICT, "identity_in_use")
    assert await tools.fact_counts(harness) == counts


async def test_a_step_run_that_moved_or_a_finished_run_refuses_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    counts = await tools.fact_counts(harness)
    runs_table = faults.table(harness, "runs")
    await harness.raw(f"UPDATE {runs_table} SET status = 'succeeded' WHERE run_id = '{run.run_id}'")
    result = await tool_steps.prepare(started.command())
    assert (result.outcome, result.reason) == (Outcome.CONFLICT, "run_not_active")
    await harness.raw(f"UPDATE {runs_table} SET status = 'running' WHERE run_id = '{run.run_id}'")
    # Not a change the state machine allows (same status): only a tampered row moves so.
    await faults.tamper_mutable(
        harness, "step_runs", "version = 7", f"step_run_id = '{started.step.step_run_id}'"
    )
    result = await tool_steps.prepare(started.command())
    assert (result.outcome, result.reason) == (Outcome.CONFLICT, "step_run_version_moved")
    assert await tools.fact_counts(harness) == counts


WRITE_FAULTS = {
    "3_audit_event": ("insert", "security_audit_events"),
    "3_trace_anchor": ("insert", "trace_anchors"),
    "3_audit_receipt": ("insert", "audit_receipts"),
    "4_step_run_cas": ("update", "step_runs"),
    "5_run_cas": ("update", "runs"),
    "6_run_event": ("insert", "run_events"),
    "6_ledger": ("insert", "step_run_mutations"),
    "7_barrier": ("insert", "tool_execution_start_barriers"),
}


@pytest.mark.parametrize("step", sorted(WRITE_FAULTS))
async def test_a_failure_at_any_write_of_the_start_rolls_back_every_fact(
    harness: Harness, clock: ManualClock, step: str
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    counts = await tools.fact_counts(harness)
    position = await tools.positions(harness, run.run_id, started.step.step_run_id)
    kind, table = WRITE_FAULTS[step]
    if kind == "insert":
        await faults.fail_inserts_into(harness, table)
    else:
        await tools.fail_updates_of(harness, table)
    with pytest.raises(errors.StoreError):
        await tool_steps.prepare(started.command())
    assert await tools.fact_counts(harness) == counts
    assert await tools.positions(harness, run.run_id, started.step.step_run_id) == position
    assert await tool_steps.get_by_start_id(started.command().start_id) is None


async def test_step_2_a_step_run_failing_its_binding_check_fails_closed(
    harness: Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    counts = await tools.fact_counts(harness)
    await faults.tamper_mutable(
        harness,
        "step_runs",
        "action_ref = 'act-forged'",
        f"step_run_id = '{started.step.step_run_id}'",
    )
    position = await tools.positions(harness, run.run_id, started.step.step_run_id)
    with pytest.raises(errors.StoreCorrupted):
        await repositories.steps(harness.store).prepare(started.command())
    assert await tools.fact_counts(harness) == counts
    assert await tools.positions(harness, run.run_id, started.step.step_run_id) == position


CORRUPTIONS = {
    "mirror_column": ("tool_execution_start_barriers", "policy_fence = '{zero}'"),
    "barrier_json": ("tool_execution_start_barriers", "barrier_json = barrier_json || ' '"),
    "barrier_digest": ("tool_execution_start_barriers", "barrier_digest = '{zero}'"),
    "ledger_line": ("step_run_mutations", "reason_code = 'forged'"),
    "trace_anchor": ("trace_anchors", "command_digest = '{zero}'"),
    "audit_receipt": ("audit_receipts", "receipt_digest = '{zero}'"),
}


@pytest.mark.parametrize("what", sorted(CORRUPTIONS))
async def test_a_hand_corrupted_barrier_is_rejected_on_read_and_on_replay(
    harness: Harness, clock: ManualClock, what: str
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    command = started.command()
    await tool_steps.prepare(command)
    table, assignment = CORRUPTIONS[what]
    where = {
        "tool_execution_start_barriers": f"start_id = '{command.start_id}'",
        "step_run_mutations": f"mutation_id = '{command.mutation.mutation_id}'",
        "trace_anchors": f"trace_id = '{command.evidence.trace_id}'",
        "audit_receipts": f"receipt_id = '{command.evidence.audit_receipt_id}'",
    }[table]
    await tools.tamper(harness, table, assignment.format(zero="0" * 64), where)
    with pytest.raises(errors.StoreCorrupted):
        await tool_steps.get_by_start_id(command.start_id)
    with pytest.raises(errors.StoreCorrupted):
        await tool_steps.get_by_started_step_run_version(run.run_id, started.step.step_run_id, 2)
    # Step 1 of a replay meets the corrupted row: it fails closed and writes nothing.
    counts = await tools.fact_counts(harness)
    with pytest.raises(errors.StoreCorrupted):
        await tool_steps.prepare(command)
    assert await tools.fact_counts(harness) == counts


async def test_a_new_step_run_version_gets_its_own_barrier_and_the_old_one_stays(
    harness: Harness, clock: ManualClock
) -> None:
    tool_steps = repositories.steps(harness.store)
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    first = await tool_steps.prepare(started.command())
    assert first.barrier is not None
    table = faults.table(harness, "step_runs")
    step_id = started.step.step_run_id
    # An operator's decision, never the product's: lost, then re-armed as ready.
    await harness.raw(
        f"UPDATE {table} SET status = 'lost', version = 3 WHERE step_run_id = '{step_id}'"
    )
    await harness.raw(
        f"UPDATE {table} SET status = 'ready', version = 4 WHERE step_run_id = '{step_id}'"
    )
    ready = await tool_steps.get_step_run(step_id)
    assert ready is not None
    retry = tool_invocations.build_command(
        ids=tool_invocations.ids_for("attempt-2"),
        plan=started.plan,
        step=ready,
        policy=tools.POLICY,
        profile="edge",
        actor="operator-1",
        dispatch=None,
        plan_digests=digests.PLAIN,
    )
    second = await tool_steps.prepare(retry)
    assert second.outcome is Outcome.CREATED
    assert second.barrier is not None
    assert second.barrier.barrier.started_step_run_version == 5
    assert second.barrier.barrier.approval_request_id is None
    assert await tool_steps.get_by_started_step_run_version(run.run_id, step_id, 2) == (
        first.barrier
    )
    assert await tool_steps.get_by_started_step_run_version(run.run_id, step_id, 5) == (
        second.barrier
    )
    # Replaying the first start now is still `existing`, never a silent overwrite.
    assert (await tool_steps.prepare(started.command())).outcome is Outcome.EXISTING


@pytest.mark.parametrize("same_command", [True, False], ids=["same_command", "other_start_id"])
async def test_two_connections_preparing_the_same_start_commit_one_barrier(
    harness: Harness, clock: ManualClock, same_command: bool
) -> None:
    run = await tools.live_run(harness, clock)
    started = await tools.started_tool(harness, clock, run)
    other_store = await harness.open_another()
    commands = [started.command(), started.command(key=None if same_command else "rival")]
    results: list[ports.StartBarrierResult] = []

    async def prepare(store: ports.Store, command: tool_start.StartCommand) -> None:
        results.append(await repositories.steps(store).prepare(command))

    async with anyio.create_task_group() as tg:
        tg.start_soon(prepare, harness.store, commands[0])
        tg.start_soon(prepare, other_store, commands[1])
    outcomes = sorted(r.outcome.value for r in results)
    if same_command:
        assert outcomes == ["created", "existing"]
    else:
        assert outcomes == ["conflict", "created"]
    barriers = faults.table(harness, "tool_execution_start_barriers")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {barriers}") == 1
    assert (await tools.fact_counts(harness))["step_run_mutations"] == 1
