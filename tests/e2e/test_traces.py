"""One trace from approval to effect, exported by the real console script to a real OTLP/HTTP
receiver (`tests.support.otlp_receiver`, which decodes the protobuf), on SQLite and
PostgreSQL: the request's span is a child of the caller's `traceparent`, the vote and the
consume are children of the request's, the claimed item's steps hang under one
`dispatch.claim` span, and the command the dispatch runs gets the execute span's context in
`TRACEPARENT`. No span names a plan's sensitive argument; a bad traceparent is one line.
Without the `OTEL_*` variables the same commands import nothing of OpenTelemetry.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from tests.support import cli_target, otlp_receiver, stores
from tests.support.cli import json_out
from tests.support.cli_target import Target

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
GIVEN = f"00-{TRACE}-{CALLER_SPAN}-01"
SENSITIVE = "7"

# Writes the TRACEPARENT it was given to $OUT: the command's view of the trace.
WRITE = """#!/bin/sh
printf '%s' "$TRACEPARENT" > "$OUT"
"""


def _configure(tmp_path: Path) -> dict[str, str]:
    script = tmp_path / "write-trace"
    script.write_text(WRITE, encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "commands.toml"
    config.write_text(
        f"""
[commands.write-trace]
executable = "{script}"
args = [{{ pattern = "[0-9]", sensitive = true }}]
env = ["OUT"]
timeout_seconds = 5
fails_cleanly = true
""",
        encoding="utf-8",
    )
    return {
        "QINGLONG_COMMANDS_FILE": str(config),
        "OUT": str(tmp_path / "traceparent.txt"),
        "QINGLONG_LOG_FORMAT": "json",
    }


@pytest.fixture(params=stores.DIALECTS)
async def traced(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Target, otlp_receiver.Receiver]]:
    async with otlp_receiver.serving() as receiver:
        env = {**_configure(tmp_path), **otlp_receiver.exporting_env(receiver)}
        async with cli_target.target(request.param, tmp_path, env) as made:
            yield made, receiver


def _submit_and_tick(t: Target) -> tuple[str, str]:
    assert t.run(t.admin, "migrate").returncode == 0
    plan = t.cwd / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "actionRef": "trace-1",
                "projectId": "p1",
                "command": "write-trace",
                "args": [SENSITIVE],
            }
        ),
        encoding="utf-8",
    )
    create = ("approval", "create", "--action", "command.run", "--plan", str(plan))
    created = json_out(
        t.run(t.runtime, *create, "--requested-by", "alice", "--traceparent", GIVEN, "--json")
    )
    approval = created["approval_request_id"]
    json_out(t.run(t.approver, "approval", "approve", approval, "--by", "bob", "--json"))
    dispatch_id = json_out(t.run(t.runtime, "approval", "consume", approval, "--json"))[
        "dispatch_id"
    ]
    ticked = t.run(t.runtime, "tick", "--once", "--json")
    assert json_out(ticked)["outcomes"] == {"succeeded": 1}, ticked.stderr
    return approval, dispatch_id


@pytest.mark.slow
async def test_a_dispatch_is_one_trace_from_its_request_to_the_commands_environment(
    traced: tuple[Target, otlp_receiver.Receiver],
) -> None:
    t, receiver = traced
    approval, dispatch_id = await anyio.to_thread.run_sync(_submit_and_tick, t)
    await receiver.wait_for(lambda: len(receiver.named("dispatch.completion")) == 1)
    assert receiver.refused == 0

    (submit,) = receiver.named("approval.submit")
    assert (submit.trace_id, submit.parent_span_id) == (TRACE, CALLER_SPAN)
    assert submit.attributes["qinglong.approval_request_id"] == approval
    assert submit.service == "qinglong-test"
    await receiver.wait_for(lambda: len(receiver.named("approval.consume")) == 1)
    (vote,) = receiver.named("approval.vote")
    (consume,) = receiver.named("approval.consume")
    for step in (vote, consume):
        assert (step.trace_id, step.parent_span_id) == (TRACE, submit.span_id)
        assert step.attributes["qinglong.approval_request_id"] == approval
    assert consume.attributes["qinglong.dispatch_id"] == dispatch_id

    (claim,) = receiver.named("dispatch.claim")
    assert (claim.trace_id, claim.parent_span_id, claim.links) == (TRACE, submit.span_id, ())
    assert claim.attributes["qinglong.dispatch_id"] == dispatch_id
    assert claim.attributes["qinglong.action_type"] == "command.run"
    assert claim.attributes["qinglong.project_id"] == "p1"
    assert claim.attributes["qinglong.outcome"] == "succeeded"
    assert (claim.attributes["qinglong.attempt"], claim.attributes["qinglong.takeover"]) == (
        1,
        False,
    )
    steps = {s.name: s for s in receiver.spans if s.parent_span_id == claim.span_id}
    assert set(steps) == {"dispatch.start_barrier", "dispatch.execute", "dispatch.completion"}
    assert all(s.trace_id == TRACE for s in steps.values())
    assert steps["dispatch.completion"].attributes["qinglong.outcome"] == "succeeded"

    # The command ran inside the execute span's context.
    written = (t.cwd / "traceparent.txt").read_text(encoding="utf-8")
    assert written == f"00-{TRACE}-{steps['dispatch.execute'].span_id}-01"
    # Ids, action, project and outcome, never the plan's arguments.
    values = [str(v) for s in receiver.spans for v in s.attributes.values()]
    assert not [v for v in values if v == SENSITIVE]

    # Log lines inside a span carry its ids.
    logged = [
        json.loads(line)
        for text in t.printed
        for line in text.splitlines()
        if line.startswith("{") and '"command_run.executed"' in line
    ]
    assert [(e["trace_id"], e["span_id"]) for e in logged] == [
        (TRACE, steps["dispatch.execute"].span_id)
    ]


@pytest.mark.slow
async def test_a_bad_traceparent_is_one_line_and_writes_nothing(
    traced: tuple[Target, otlp_receiver.Receiver],
) -> None:
    t, _ = traced

    def attempt() -> subprocess.CompletedProcess[str]:
        assert t.run(t.admin, "migrate").returncode == 0
        return t.run(
            t.runtime,
            "submit",
            "run-create",
            "--project",
            "p1",
            "--task",
            "t1",
            "--revision",
            "1",
            "--traceparent",
            "00-zz-00f067aa0ba902b7-01",
        )

    done = await anyio.to_thread.run_sync(attempt)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "traceparent: not a W3C trace context" in lines[0]
    assert "Traceback" not in done.stderr
    status = json_out(t.run(t.runtime, "status", "--json"))
    assert sum(status["executions"].values()) == 0


PROBE = """
import json, sys
from qinglong_dispatcher import cli
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "otel": [m for m in sys.modules if m.startswith("opentelemetry")]}))
"""


def _probe(tmp_path: Path, env: dict[str, str]) -> list[bool]:
    """Whether `submit` and `tick --once` (each a new process) imported OpenTelemetry."""
    common = ["--profile", "edge", "--database", f"sqlite:///{tmp_path / 'q.db'}"]
    subprocess.run(
        [sys.executable, "-m", "qinglong_dispatcher", *common, "migrate"],
        env=env,
        capture_output=True,
        check=True,
        timeout=60,
    )
    imported = []
    submit = ["submit", "run-create", "--project", "p", "--task", "t", "--revision", "1"]
    for command in (submit, ["tick", "--once", "--json"]):
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *common, *command],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["code"] == 0, done.stderr
        imported.append(bool(report["otel"]))
    return imported


@pytest.mark.slow
@pytest.mark.parametrize("on", [False, True])
async def test_without_the_otel_variables_nothing_of_opentelemetry_is_imported(
    tmp_path: Path, on: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QINGLONG_", "OTEL_"))}
    async with otlp_receiver.serving() as receiver:
        if on:
            env.update(otlp_receiver.exporting_env(receiver))
        assert await anyio.to_thread.run_sync(_probe, tmp_path, env) == [on, on]
        if on:
            await receiver.wait_for(lambda: bool(receiver.named("dispatch.claim")))
        else:
            assert receiver.spans == []
