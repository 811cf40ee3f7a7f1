"""SIGKILL after command.run ran: each line written once, settled by its check; none: it waits."""

from __future__ import annotations

import functools
import json
import signal
import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import effect_crash, stores

pytestmark = pytest.mark.slow

ACTION = "command.run"
ROUNDS = 24
"""20 kills after the command ran (the CLI killed while the command sleeps after appending, or
the batch killing itself once execute returned), and every sixth round a kill before it ran."""
SCRIPT = 'printf "%s\\n" "$1" >> "$0"; sleep "$2"'
"""Appends the plan's first argument as a line to the file `$0`, then sleeps `$2` seconds."""
ENV = {
    # Short leases, so that killed executions are recovery_required soon.
    "QINGLONG_LEASE_SECONDS": "2",
    "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1.5",
    # One dispatch per claim: each victim holds exactly the dispatch the test just seeded.
    "QINGLONG_PAGE_SIZE": "1",
}


def _commands_file(directory: Path, lines: Path) -> Path:
    def s(value: str) -> str:
        return json.dumps(value)  # an ASCII JSON string is a TOML basic string

    # A command per round: a command is its runs' target, and each killed run holds it until
    # recovery settles it (docs/actions.md#declaring-a-target).
    config = directory / "commands.toml"
    config.write_text(
        "".join(
            f"""
[commands.{_command(i)}]
executable = "/bin/sh"
argv = ["-c", {s(SCRIPT)}, {s(str(lines))}]
args = [{{ pattern = "line-[0-9]{{1,3}}" }}, {{ pattern = "[01]" }}]
fails_cleanly = false
timeout_seconds = 1.4
check = {{ argv = ["/bin/grep", "-x", "{{0}}", {s(str(lines))}], expect = "." }}
"""
            for i in range(ROUNDS)
        ),
        encoding="utf-8",
    )
    return config


def _command(round_: int) -> str:
    return f"append-line-{round_}"


def _plan(line: str, pause: str) -> dict[str, object]:
    return {
        "schemaVersion": 1,
        "actionRef": line,
        "projectId": "p1",
        "command": _command(int(line.removeprefix("line-"))),
        "args": [line, pause],
    }


def _lines(lines: Path) -> list[str]:
    return lines.read_text(encoding="utf-8").splitlines()


def _written(lines: Path, line: str) -> int:
    return _lines(lines).count(line)


def _appended(lines: Path, line: str) -> bool:
    return _written(lines, line) == 1


def _still_running(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (the commands left by killed victims)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:  # it ended meanwhile
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("dialect", stores.DIALECTS)
async def test_a_sigkill_after_the_command_ran_is_settled_by_its_check_and_never_run_again(
    tmp_path: Path, dialect: str
) -> None:
    lines = tmp_path / "lines.txt"
    lines.touch()  # the check's grep answers "no" (1) for a missing line, "cannot" (2) for a file
    env = {**ENV, "QINGLONG_COMMANDS_FILE": str(_commands_file(tmp_path, lines))}
    async with effect_crash.target(dialect, tmp_path, env) as t:
        ran: dict[str, str] = {}
        never_ran: dict[str, str] = {}
        for i in range(ROUNDS):
            line = f"line-{i}"
            if i % 6 == 5:
                # The barrier committed, the command never started.
                dispatch_id = await t.seed(ACTION, _plan(line, "0"))
                victim = t.start(effect_crash.crash_argv(ACTION, "before_execute"))
                assert await effect_crash.reap(victim) == -signal.SIGKILL, t.log()
                never_ran[dispatch_id] = line
            elif i % 2 == 0:
                # The real CLI, killed while the command (its own process group, which the
                # kill does not reach) sleeps after appending: it finishes on its own.
                dispatch_id = await t.seed(ACTION, _plan(line, "1"))
                victim = t.start(effect_crash.tick_argv())
                await effect_crash.kill_when(
                    victim, functools.partial(_appended, lines, line), why="the line was written"
                )
                ran[dispatch_id] = line
            else:
                # The command exited 0 and execute returned, then the process died.
                dispatch_id = await t.seed(ACTION, _plan(line, "0"))
                victim = t.start(effect_crash.crash_argv(ACTION, "after_execute"))
                assert await effect_crash.reap(victim) == -signal.SIGKILL, t.log()
                assert _written(lines, line) == 1
                ran[dispatch_id] = line
            row = await t.store.get_execution(dispatch_id)
            assert row is not None
            assert row.status is ExecutionStatus.EXECUTING  # the kill landed after the barrier

        outcomes = await effect_crash.settle(t, [*ran, *never_ran])
        assert len(ran) == 20
        for dispatch_id in ran:
            assert outcomes[dispatch_id] == effect_crash.Outcome(
                ExecutionStatus.SUCCEEDED, "evidence", None, 1
            )
        for dispatch_id in never_ran:
            assert outcomes[dispatch_id] == effect_crash.Outcome(
                ExecutionStatus.EXECUTING, None, ("missing", "check_not_matched"), 1
            )
        written = _lines(lines)
        assert sorted(written) == sorted(ran.values())  # each run's line once, no other

    # The commands the kills left behind end by themselves: nothing of this test runs on.
    deadline = time.monotonic() + 10
    while left := _still_running(str(lines)):
        assert time.monotonic() < deadline, f"commands still running: {left}"
        await anyio.sleep(0.05)
    assert _lines(lines) == written  # and none of them wrote anything late
