"""Recovery of `command.run` over a real SQLite store and real processes: the configured check
proves a run (or says it is not there), a check that cannot look raises (`unavailable`), a
command without one is the operator's, and an uncertain run waits for the check — through the
real dispatcher and reconciler, with the command run exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import command_run, contract
from qinglong_dispatcher.actions.command_run import commands, evidence, plan
from qinglong_dispatcher.domain import plans, recovery
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.recovery import started_execution

MODELS: plans.PlanModels = {plan.ACTION_TYPE: plan.CommandRunPlan}
Kind = recovery.EvidenceKind


@pytest.fixture
async def sqlite(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as opened:
        yield opened


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def config(tmp_path: Path) -> commands.CommandSet:
    log = tmp_path / "log"
    append = _script(tmp_path, "append", f'printf \'%s\\n\' "$1" >> {log}\nexit "$2"\n')
    args = [{"pattern": "[a-z-]+"}, {"pattern": "[0-9]"}]
    grep: dict[str, Any] = {"argv": ["/bin/grep", "-x", "-F", "-e", "{0}", str(log)]}
    table: dict[str, Any] = {
        "checked": {"executable": append, "args": args, "check": {**grep, "expect": r"\S"}},
        "unchecked": {"executable": append, "args": args},
        "stuck": {
            "executable": append,
            "args": args,
            "check": {
                "argv": [_script(tmp_path, "stuck", "sleep 30\n")],
                "expect": "x",
                "timeout_seconds": 0.3,
            },
        },
        "gone": {
            "executable": append,
            "args": args,
            "check": {"argv": [_script(tmp_path, "gone", "exit 0\n")], "expect": "x"},
        },
    }
    return commands.parse({"commands": table}, source="test")


async def _submit(h: stores.Harness, clock: ManualClock, command: str, *args: str) -> str:
    data = {"schemaVersion": 1, "actionRef": f"act-{args[0]}", "projectId": "p1"}
    run_plan = plans.parse_plan(
        plan.ACTION_TYPE, {**data, "command": command, "args": list(args)}, models=MODELS
    )
    (consumed,) = await make_api(h.approver_store, clock).submit(
        [run_plan], requested_by="tester", approved_by="approver"
    )
    return consumed.dispatch_id


async def _snapshot(h: stores.Harness, clock: ManualClock) -> recovery.Snapshot:
    """A started execution whose worker died: what the reconciler hands the provider."""
    dispatch, _ = await started_execution(h, clock)
    execution = await h.store.get_execution(dispatch.dispatch_id)
    assert execution is not None
    return recovery.Snapshot(execution=execution, dispatch=dispatch, observation=None)


def _provider(h: stores.Harness, config: commands.CommandSet) -> evidence.CommandRunEvidence:
    return evidence.CommandRunEvidence(contract.PlanReader(h.store, MODELS), config)


async def test_the_check_verifies_a_line_that_is_there_with_a_stable_digest(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, "checked", "alpha", "0")
    snapshot = await _snapshot(sqlite, clock)
    (tmp_path / "log").write_text("beta\nalpha\n")
    provider = _provider(sqlite, config)
    first = await provider.evidence(snapshot)
    assert first.kind is Kind.VERIFIED_SUCCEEDED
    assert first.evidence_digest is not None
    assert len(first.evidence_digest) == 64
    assert await provider.evidence(snapshot) == first
    assert (tmp_path / "log").read_text() == "beta\nalpha\n"  # only looked


async def test_the_check_answers_missing_when_the_line_is_not_there(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, "checked", "alpha", "0")
    snapshot = await _snapshot(sqlite, clock)
    (tmp_path / "log").write_text("alphabet\n")
    found = await _provider(sqlite, config).evidence(snapshot)
    assert found == recovery.Evidence(kind=Kind.MISSING, reason="check_not_matched")


async def test_a_no_counts_only_once_the_run_cannot_still_be_going(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, "checked", "alpha", "0")
    snapshot = await _snapshot(sqlite, clock)
    (tmp_path / "log").write_text("")
    command = config.get("checked")
    assert command is not None
    provider = evidence.CommandRunEvidence(
        contract.PlanReader(sqlite.store, MODELS), config, clock=clock
    )
    # A dispatcher killed mid-run leaves its command going: within its timeout, no "no".
    with pytest.raises(evidence.CheckUnavailable) as early:
        await provider.evidence(snapshot)
    assert early.value.code == "check_too_early"
    clock.advance(ms=int(command.timeout_seconds * 1000) + evidence.NO_BEFORE_MARGIN_MS)
    found = await provider.evidence(snapshot)
    assert found == recovery.Evidence(kind=Kind.MISSING, reason="check_not_matched")


async def test_a_check_that_cannot_look_raises_rather_than_answer_missing(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, "checked", "alpha", "0")
    snapshot = await _snapshot(sqlite, clock)
    # No log at all: grep exits 2 ("trouble"), which is not a "no".
    with pytest.raises(evidence.CheckUnavailable) as info:
        await _provider(sqlite, config).evidence(snapshot)
    assert info.value.code == "check_failed"
    # A configuration that no longer has the command cannot say how to look either.
    with pytest.raises(evidence.CheckUnavailable):
        await _provider(sqlite, commands.CommandSet({})).evidence(snapshot)


@pytest.mark.parametrize(("command", "code"), [("stuck", "check_timeout"), ("gone", None)])
async def test_a_check_that_times_out_or_cannot_start_raises(
    sqlite: stores.Harness,
    config: commands.CommandSet,
    tmp_path: Path,
    command: str,
    code: str | None,
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, command, "alpha", "0")
    snapshot = await _snapshot(sqlite, clock)
    (tmp_path / "gone").unlink()
    with pytest.raises(evidence.CheckUnavailable) as info:
        await _provider(sqlite, config).evidence(snapshot)
    assert info.value.code == (code or "command_spawn_failed")


async def test_a_command_without_a_check_is_left_to_the_operator(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    clock = ManualClock()
    await _submit(sqlite, clock, "unchecked", "alpha", "0")
    found = await _provider(sqlite, config).evidence(await _snapshot(sqlite, clock))
    assert found == recovery.Evidence(kind=Kind.MISSING, reason=recovery.MANUAL_ONLY)


async def _dispatch_and_reconcile(
    h: stores.Harness, config: commands.CommandSet, command: str, status: str
) -> tuple[str, ExecutionStatus, dict[str, int]]:
    clock = ManualClock()
    handler, provider = command_run.build(config, contract.PlanReader(h.store, MODELS), clock)
    dispatch_id = await _submit(h, clock, command, "alpha", status)
    handlers: dict[str, ports.ApprovedActionHandler] = {plan.ACTION_TYPE: handler}
    await make_dispatcher(h.store, clock, handlers=handlers).dispatch_batch()
    after_run = await h.store.get_execution(dispatch_id)
    assert after_run is not None
    clock.advance(ms=LEASE_MS)
    passed = await reconciler.Reconciler(
        h.store, {plan.ACTION_TYPE: provider}, clock
    ).reconcile_pass()
    return dispatch_id, after_run.status, dict(passed.outcomes)


async def test_an_uncertain_run_waits_for_the_check_and_is_settled_by_it_never_rerun(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    # Exit 3 from a command that does not fail cleanly proves nothing: no completion is written.
    dispatch_id, after_run, outcomes = await _dispatch_and_reconcile(sqlite, config, "checked", "3")
    assert after_run is ExecutionStatus.EXECUTING
    assert outcomes == {"resolved_succeeded": 1}
    row = await sqlite.store.get_execution(dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.SUCCEEDED
    assert (tmp_path / "log").read_text() == "alpha\n"  # ran once, and recovery only looked


async def test_a_run_that_exits_zero_is_completed_succeeded_at_once(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    dispatch_id, after_run, outcomes = await _dispatch_and_reconcile(
        sqlite, config, "unchecked", "0"
    )
    assert after_run is ExecutionStatus.SUCCEEDED
    row = await sqlite.store.get_execution(dispatch_id)
    assert row is not None
    assert row.result_code == "command_succeeded"
    assert (tmp_path / "log").read_text() == "alpha\n"
    assert sum(outcomes.values()) == 0  # nothing left for recovery
