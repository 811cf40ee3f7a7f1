"""`command.run` end to end, on SQLite and PostgreSQL: the real console script runs an approved,
operator-configured command once with the plan's arguments; a run that fails cleanly is
`failed`, one whose end proves nothing waits in `recovery_required` until the command's check
finds its effect; a sensitive argument and a secret are found nowhere but in the command.
"""

from __future__ import annotations

import stat
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import cli_target, stores
from tests.support.cli import json_out
from tests.support.cli_target import Target

ACTION = "command.run"

# Appends "<name> <secret-length>" to the ledger, then exits with the code it is given: the
# effect is the line, whatever the exit code says.
APPEND = """#!/bin/sh
printf '%s %s\\n' "$1" "${#ROUTE_TOKEN}" >> "$LEDGER"
exit "$2"
"""


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def _configure(tmp_path: Path, token: str) -> tuple[Path, Path, dict[str, str]]:
    script = tmp_path / "append-route"
    script.write_text(APPEND, encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    ledger = tmp_path / "routes.txt"
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "route-token").write_text(token, encoding="utf-8")
    config = tmp_path / "commands.toml"
    config.write_text(
        f"""
[commands.add-route]
executable = "{script}"
args = [{{ pattern = "[a-z0-9-]{{1,32}}" }}, {{ pattern = "[0-9]", sensitive = true }}]
env = ["LEDGER"]
env_secrets = {{ ROUTE_TOKEN = "credential:route-token" }}
timeout_seconds = 1
fails_cleanly = false
check = {{ argv = ["/bin/grep", "-F", "{{0}}", "{ledger}"], expect = "." }}

[commands.add-route-strict]
executable = "{script}"
args = [{{ pattern = "[a-z0-9-]{{1,32}}" }}, {{ pattern = "[0-9]" }}]
env = ["LEDGER"]
timeout_seconds = 1
fails_cleanly = true
""",
        encoding="utf-8",
    )
    env = {
        "QINGLONG_COMMANDS_FILE": str(config),
        "CREDENTIALS_DIRECTORY": str(credentials),
        "LEDGER": str(ledger),
        "QINGLONG_LEASE_SECONDS": "2",
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1.5",
        "QINGLONG_LOG_LEVEL": "debug",
    }
    return config, ledger, env


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    _, _, env = _configure(tmp_path, f"secret-{uuid.uuid4().hex}")
    async with cli_target.target(request.param, tmp_path, env) as made:
        yield made


def _dispatch(t: Target, ref: str, command: str, args: list[str]) -> str:
    return t.dispatch(ACTION, ref, {"projectId": "p1", "command": command, "args": args})


def _show(t: Target, dispatch_id: str) -> dict[str, Any]:
    return t.show(dispatch_id)


def _tick(t: Target) -> dict[str, int]:
    outcomes: dict[str, int] = json_out(t.run(t.runtime, "tick", "--once", "--json"))["outcomes"]
    return outcomes


def _settled(t: Target, dispatch_id: str) -> dict[str, Any]:
    """Tick until recovery has looked at `dispatch_id` (its lease must run out first)."""
    deadline = time.monotonic() + 30
    while True:
        _tick(t)
        shown = _show(t, dispatch_id)
        if shown["execution"]["status"] != "executing" or shown["observation"] is not None:
            return shown
        assert time.monotonic() < deadline, "recovery never looked at the uncertain run"
        time.sleep(0.3)


def _end_to_end(t: Target, token: str) -> None:
    assert t.run(t.admin, "migrate").returncode == 0
    ran = _dispatch(t, "route-1", "add-route", ["r-one", "0"])
    assert _lines(t.cwd / "routes.txt") == []  # approving and consuming ran nothing
    assert _tick(t) == {"succeeded": 1}
    assert _lines(t.cwd / "routes.txt") == [f"r-one {len(token)}"]  # the secret reached the command
    receipt = _show(t, ran)["execution"]["receipt"]
    assert (receipt["exitCode"], receipt["commandName"]) == (0, "add-route")

    # Exit 3 of a command that fails cleanly: failed, with its receipt.
    failed = _dispatch(t, "route-2", "add-route-strict", ["r-two", "3"])
    assert _tick(t) == {"failed": 1}
    shown = _show(t, failed)
    assert (shown["execution"]["result_code"], shown["execution"]["receipt"]["exitCode"]) == (
        "command_exit_3",
        3,
    )

    # Exit 4 of a command that does not: uncertain; the check finds its line and settles it.
    uncertain = _dispatch(t, "route-3", "add-route", ["r-three", "4"])
    assert _tick(t) == {"uncertain": 1}
    settled = _settled(t, uncertain)
    assert settled["execution"]["status"] == "succeeded"
    assert settled["resolution"]["source"] == "evidence"
    lines = _lines(t.cwd / "routes.txt")
    assert [line.split()[0] for line in lines] == ["r-one", "r-two", "r-three"]
    assert _tick(t) == {}  # nothing runs twice


@pytest.mark.slow
async def test_an_approved_command_runs_once_and_an_uncertain_run_is_settled_by_its_check(
    target: Target,
) -> None:
    token = (target.cwd / "credentials" / "route-token").read_text(encoding="utf-8")
    await anyio.to_thread.run_sync(_end_to_end, target, token)
    assert all(token not in text for text in target.printed)
    assert token.encode() not in await anyio.to_thread.run_sync(target.stored_bytes)
