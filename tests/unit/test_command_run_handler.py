"""The `command.run` handler over a real SQLite store and real processes: inspect admits only
what the configuration allows and runs nothing; execute runs the approved command once and
maps its end to succeeded, failed (only when nothing can have changed) or uncertain, with a
receipt that holds digests and counts but never a secret or a sensitive argument."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.command_run import commands, handler, plan
from qinglong_dispatcher.domain import canonical, plans, records
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

MODELS: plans.PlanModels = {plan.ACTION_TYPE: plan.CommandRunPlan}
SECRET = "tok-3f9a2c71"
HIDDEN = "pa55-w0rd-arg"
Kind = ports.ExecuteKind


@pytest.fixture
async def sqlite(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as opened:
        yield opened


@pytest.fixture
def config(tmp_path: Path) -> commands.CommandSet:
    def script(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return str(path)

    any_arg = {"pattern": ".*"}
    table: dict[str, Any] = {
        "append": {
            "executable": script("append", f"printf '%s\\n' \"$1\" >> {tmp_path}/log\n"),
            "args": [{"pattern": "[^/]*"}],
            "cwd": str(tmp_path),
        },
        "exit": {"executable": script("exit", 'echo "$1" >&2\nexit "$1"\n'), "args": [any_arg]},
        "clean": {
            "executable": script("clean", 'exit "$1"\n'),
            "args": [any_arg],
            "fails_cleanly": True,
        },
        "leak": {
            "executable": script("leak", 'echo "t=$TOKEN a=$2" >&2\necho "$TOKEN $2"\n'),
            "args": [any_arg, {"pattern": ".*", "sensitive": True}],
            "env_secrets": {"TOKEN": "env:QL_TEST_TOKEN"},
        },
        "unset": {
            "executable": script("unset", "exit 0\n"),
            "env_secrets": {"TOKEN": "env:QL_TEST_ABSENT"},
        },
        "sleep": {"executable": script("sleep", "sleep 30\n"), "timeout_seconds": 0.3},
        "slow": {"executable": script("slow", "sleep 30\n"), "timeout_seconds": 30},
    }
    return commands.parse({"commands": table}, source="test")


def _handler(h: stores.Harness, config: commands.CommandSet) -> handler.CommandRunHandler:
    reader = contract.PlanReader(h.store, MODELS)
    environ = {"QL_TEST_TOKEN": SECRET, "PATH": "/usr/bin:/bin"}
    return handler.CommandRunHandler(reader, config, ManualClock(), environ=environ)


async def _submit(
    h: stores.Harness, clock: ManualClock, command: str, args: Sequence[str]
) -> records.Dispatch:
    data = {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1"}
    run_plan = plans.parse_plan(
        plan.ACTION_TYPE, {**data, "command": command, "args": list(args)}, models=MODELS
    )
    (consumed,) = await make_api(h.approver_store, clock).submit(
        [run_plan], requested_by="tester", approved_by="approver"
    )
    dispatch = await h.store.get_dispatch(consumed.dispatch_id)
    assert dispatch is not None
    return dispatch


async def _execute(
    h: stores.Harness,
    config: commands.CommandSet,
    command: str,
    args: Sequence[str],
    *,
    deadline_ms: int = 10_000,
) -> ports.ExecuteResult:
    clock = ManualClock()
    await _submit(h, clock, command, args)
    dispatch, identity = await started_execution(h, clock)
    ctx = ports.ExecutionContext(
        dispatch=dispatch, identity=identity, deadline_ms=clock.now_ms() + deadline_ms
    )
    return await _handler(h, config).execute(ctx)


async def test_inspect_answers_the_approved_digest_and_runs_nothing(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    dispatch = await _submit(sqlite, ManualClock(), "append", ["hello"])
    found = await _handler(sqlite, config).inspect(dispatch)
    assert found == ports.InspectResult(
        kind=ports.InspectKind.READY, action_digest=dispatch.action_digest
    )
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize(
    ("command", "args", "code"),
    [
        ("absent", ["x"], "command_unknown"),
        ("append", ["../etc/passwd"], "command_args_invalid"),
        ("append", [], "command_args_invalid"),
        ("append", ["a", "b"], "command_args_invalid"),
    ],
)
async def test_inspect_blocks_what_the_configuration_does_not_admit(
    sqlite: stores.Harness, config: commands.CommandSet, command: str, args: list[str], code: str
) -> None:
    dispatch = await _submit(sqlite, ManualClock(), command, args)
    found = await _handler(sqlite, config).inspect(dispatch)
    assert found == ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=code)


async def test_inspect_blocks_a_plan_it_cannot_resolve_with_its_code(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    dispatch = await _submit(sqlite, ManualClock(), "append", ["x"])
    elsewhere = dataclasses.replace(dispatch, action_ref="act-none")
    found = await _handler(sqlite, config).inspect(elsewhere)
    assert found == ports.InspectResult(kind=ports.InspectKind.BLOCKED, code="plan_missing")


async def test_a_removed_executable_is_transient_at_inspect_and_a_spawn_failure_at_execute(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    dispatch = await _submit(sqlite, ManualClock(), "append", ["x"])
    (tmp_path / "append").unlink()
    found = await _handler(sqlite, config).inspect(dispatch)
    assert found == ports.InspectResult(
        kind=ports.InspectKind.TRANSIENT, code="command_unavailable"
    )
    clock = ManualClock()
    dispatch, identity = await started_execution(sqlite, clock)
    ctx = ports.ExecutionContext(dispatch=dispatch, identity=identity, deadline_ms=clock.ms + 5000)
    result = await _handler(sqlite, config).execute(ctx)
    assert (result.kind, result.code, result.receipt) == (Kind.FAILED, "command_spawn_failed", None)


async def test_execute_runs_once_and_no_shell_reads_the_argument(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    hostile = "$(touch x); `touch y` *"
    result = await _execute(sqlite, config, "append", [hostile])
    assert (result.kind, result.code) == (Kind.SUCCEEDED, "command_succeeded")
    assert (tmp_path / "log").read_text() == hostile + "\n"
    assert not (tmp_path / "x").exists()
    assert not (tmp_path / "y").exists()
    assert result.receipt is not None
    canonical.dumps(result.receipt)  # canonical-JSON values only
    assert set(result.receipt) == {
        "commandName",
        "exitCode",
        "timedOut",
        "stdoutDigest",
        "stdoutBytes",
        "stderrDigest",
        "stderrBytes",
        "stderrHead",
        "truncated",
    }
    assert (result.receipt["commandName"], result.receipt["exitCode"]) == ("append", 0)


@pytest.mark.parametrize(
    ("command", "status", "kind", "code"),
    [
        ("exit", "0", Kind.SUCCEEDED, "command_succeeded"),
        ("clean", "0", Kind.SUCCEEDED, "command_succeeded"),
        ("clean", "3", Kind.FAILED, "command_exit_3"),
        ("exit", "3", Kind.UNCERTAIN, "command_exit_uncertain"),
    ],
)
async def test_an_exit_status_maps_to_the_outcome_fails_cleanly_allows(
    sqlite: stores.Harness,
    config: commands.CommandSet,
    command: str,
    status: str,
    kind: ports.ExecuteKind,
    code: str,
) -> None:
    result = await _execute(sqlite, config, command, [status])
    assert (result.kind, result.code) == (kind, code)
    assert result.receipt is not None
    assert result.receipt["exitCode"] == int(status)


async def test_a_timeout_is_uncertain(sqlite: stores.Harness, config: commands.CommandSet) -> None:
    result = await _execute(sqlite, config, "sleep", [])
    assert (result.kind, result.code) == (Kind.UNCERTAIN, "command_timeout")
    assert result.receipt is not None
    assert (result.receipt["exitCode"], result.receipt["timedOut"]) == (None, True)


async def test_the_execute_deadline_bounds_a_longer_command_timeout(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    started = time.monotonic()
    result = await _execute(sqlite, config, "slow", [], deadline_ms=300)
    assert time.monotonic() - started < 1.5
    assert (result.kind, result.code) == (Kind.UNCERTAIN, "command_timeout")


async def test_a_passed_deadline_fails_before_anything_runs(
    sqlite: stores.Harness, config: commands.CommandSet, tmp_path: Path
) -> None:
    result = await _execute(sqlite, config, "append", ["x"], deadline_ms=0)
    assert (result.kind, result.code) == (Kind.FAILED, "command_deadline_passed")
    assert not (tmp_path / "log").exists()


async def test_secrets_and_sensitive_arguments_reach_the_command_but_no_receipt_or_log(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    with structlog.testing.capture_logs() as logs:
        result = await _execute(sqlite, config, "leak", ["shown", HIDDEN])
    assert result.kind is Kind.SUCCEEDED
    assert result.receipt is not None
    assert result.receipt["stderrHead"] == "t=[redacted] a=[redacted]\n"
    assert result.receipt["stdoutBytes"] == len(f"{SECRET} {HIDDEN}\n")
    for text in (json.dumps(result.receipt), json.dumps(logs, default=str)):
        assert SECRET not in text
        assert HIDDEN not in text
    assert [entry["event"] for entry in logs] == ["command_run.executed"]


async def test_an_unreadable_secret_fails_before_anything_runs(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    result = await _execute(sqlite, config, "unset", [])
    assert (result.kind, result.code, result.receipt) == (Kind.FAILED, "secret_unavailable", None)


async def test_a_command_no_longer_configured_at_execute_fails_before_anything_runs(
    sqlite: stores.Harness, config: commands.CommandSet
) -> None:
    narrower = commands.CommandSet({})
    clock = ManualClock()
    await _submit(sqlite, clock, "append", ["x"])
    dispatch, identity = await started_execution(sqlite, clock)
    ctx = ports.ExecutionContext(dispatch=dispatch, identity=identity, deadline_ms=clock.ms + 5000)
    result = await _handler(sqlite, narrower).execute(ctx)
    assert (result.kind, result.code) == (Kind.FAILED, "command_unknown")
