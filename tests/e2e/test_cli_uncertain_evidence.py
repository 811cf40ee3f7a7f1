"""An uncertain `command.run` end to end through the real console script, on SQLite and
PostgreSQL: a command that is not known to fail cleanly exits 1 after writing its secret to
stderr; `dispatch show` gives its exit code and redacted stderr head, recovery's verdict in
words (no automatic evidence, never "missing") and the ledger's `recovery_required` line; an
operator's `recovery resolve` is the ledger's last line under the operator's principal, not
the daemon's owner id. The secret is in no output, log line or stored byte."""

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

FAIL_LOUD = """#!/bin/sh
echo "token=$ROUTE_TOKEN refused $1" >&2
exit 1
"""


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    script = tmp_path / "fail-loud"
    script.write_text(FAIL_LOUD, encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "route-token").write_text(f"secret-{uuid.uuid4().hex}", encoding="utf-8")
    config = tmp_path / "commands.toml"
    config.write_text(
        f"""
[commands.fail-loud]
executable = "{script}"
args = [{{ pattern = "[a-z0-9-]{{1,32}}" }}]
env_secrets = {{ ROUTE_TOKEN = "credential:route-token" }}
timeout_seconds = 0.4
fails_cleanly = false
""",
        encoding="utf-8",
    )
    env = {
        "QINGLONG_COMMANDS_FILE": str(config),
        "CREDENTIALS_DIRECTORY": str(credentials),
        "QINGLONG_LEASE_SECONDS": "1",
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "0.5",
        "QINGLONG_OWNER_ID": "daemon-7",
        "QINGLONG_LOG_LEVEL": "debug",
    }
    async with cli_target.target(request.param, tmp_path, env) as made:
        yield made


def _observed(t: Target, dispatch_id: str) -> dict[str, Any]:
    """Tick until a recovery pass has observed `dispatch_id` (its lease must run out first)."""
    deadline = time.monotonic() + 30
    while True:
        json_out(t.run(t.runtime, "tick", "--once", "--json"))
        shown = t.show(dispatch_id)
        if shown["observation"] is not None:
            return shown
        assert time.monotonic() < deadline, "recovery never looked at the uncertain run"
        time.sleep(0.3)


def _end_to_end(t: Target) -> None:
    assert t.run(t.admin, "migrate").returncode == 0
    ran = t.dispatch(
        "command.run", "route-1", {"projectId": "p1", "command": "fail-loud", "args": ["r-one"]}
    )
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"uncertain": 1}
    shown = _observed(t, ran)
    assert shown["execution"]["effective_status"] == "recovery_required"
    lost = shown["uncertain"]
    assert (lost["result_code"], lost["lease_owner"]) == ("command_exit_uncertain", "daemon-7")
    assert (lost["evidence"]["exitCode"], lost["evidence"]["signal"]) == (1, None)
    assert lost["evidence"]["stderrHead"] == "token=[redacted] refused r-one\n"
    assert shown["verdicts"][0].startswith(
        "no automatic evidence for this action: check the target"
    )
    assert [e["to_status"] for e in shown["events"]][-1] == "recovery_required"

    text = t.run(t.runtime, "dispatch", "show", ran).stdout
    for line in (
        "lost track   command_exit_uncertain (attempt 1, daemon-7)",
        "  exit code: 1",
        "evidence     no automatic evidence for this action: check the target",
        "executing → recovery_required",
    ):
        assert line in text, line
    assert "missing (manual_only)" not in text  # a code alone reads as "did not happen"
    listed = t.run(t.runtime, "recovery", "list").stdout
    assert "no automatic evidence for this action: check the target" in listed
    (row,) = json_out(t.run(t.runtime, "recovery", "list", "--json"))
    assert row["last_observation"]["verdict"].startswith("no automatic evidence for this action")

    operator = t.runtime if t.database is None else cli_operator(t)
    settled = t.run(
        operator,
        "recovery",
        "resolve",
        ran,
        "--as",
        "failed",
        "--operator",
        "oncall-1",
        "--reason",
        "checked_target",
    )
    assert settled.returncode == 0, settled.stderr
    after = t.show(ran)
    last = after["events"][-1]
    assert (last["from_status"], last["to_status"], last["settled_by"]) == (
        "executing",
        "failed",
        "oncall-1",
    )
    assert last["settled_principal"] == after["resolution"]["principal"]
    assert last["settled_principal"] != "daemon-7"
    assert last["lease_owner"] == "daemon-7"
    assert "settled by oncall-1" in t.run(t.runtime, "dispatch", "show", ran).stdout


def cli_operator(t: Target) -> list[str]:
    assert t.database is not None
    return ["--profile", "cluster", "--database", stores.operator_url(t.database)]


@pytest.mark.slow
async def test_an_uncertain_command_keeps_its_evidence_and_the_ledger_names_its_settler(
    target: Target,
) -> None:
    await anyio.to_thread.run_sync(_end_to_end, target)
    token = (target.cwd / "credentials" / "route-token").read_text(encoding="utf-8")
    assert all(token not in text for text in target.printed)
    assert token.encode() not in await anyio.to_thread.run_sync(target.stored_bytes)
