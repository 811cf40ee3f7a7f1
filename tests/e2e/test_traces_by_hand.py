"""The trace a dispatch was submitted under, followed where a person acts, on SQLite and
PostgreSQL, exported to a real OTLP/HTTP receiver (`tests.support.otlp_receiver`):

- `submit tool-invoke --traceparent` (the real console script): the request's span is a child
  of the caller's context, and the tool step's claim and steps hang under it; a bad one is one
  line and writes nothing;
- a resolution by hand (`recovery resolve` of a tool step whose process was SIGKILLed; the
  API's resolve and its bulk settle, in this process with tracing on): its `recovery.resolve`
  span is a child of the request's span, naming the outcome and the principal, never the
  reason's comment or a token.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import api, tracing
from qinglong_dispatcher.adapters import otel_traces
from qinglong_dispatcher.domain import states
from qinglong_dispatcher.usecases import resolving
from tests.support import cli_target, otlp_receiver, stores
from tests.support.actions import make_api
from tests.support.api_writes import Served, serving
from tests.support.cli import json_out
from tests.support.cli_target import Target
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
GIVEN = f"00-{TRACE}-{CALLER_SPAN}-01"
COMMENT = "called-the-vendor-7731"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=stores.DIALECTS)
async def traced(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Target, otlp_receiver.Receiver]]:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    async with otlp_receiver.serving() as receiver:
        env = {
            **otlp_receiver.exporting_env(receiver),
            "QINGLONG_TOOL_SANDBOX_DIR": str(sandbox),
            "QINGLONG_LEASE_SECONDS": "1",
        }
        async with cli_target.target(request.param, tmp_path, env) as made:
            yield made, receiver


def _found(value: Any, key: str) -> Any:
    """The first value of `key` anywhere in a JSON document."""
    if isinstance(value, dict):
        if value.get(key) is not None:
            return value[key]
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            if (inner := _found(item, key)) is not None:
                return inner
    return None


def _tool_step(t: Target, *traceparent: str, tick: bool = True) -> Any:
    """A Run, then a tool step of it submitted with `--traceparent` (and ticked when it is
    accepted and `tick`): the submit's process result and its JSON when it succeeded."""
    assert t.run(t.admin, "migrate").returncode == 0
    made = json_out(
        t.run(
            t.self_approver,
            *("submit", "run-create", "--project", "p1", "--task", "t", "--revision", "1"),
            "--json",
        )
    )
    assert json_out(t.run(t.runtime, "tick", "--once", "--json"))["outcomes"] == {"succeeded": 1}
    run_id = _found(t.show(made["dispatch_id"]), "run_id")
    assert run_id is not None
    content = t.cwd / "content.txt"
    content.write_text("traced\n", encoding="utf-8")
    done = t.run(
        t.self_approver,
        *("submit", "tool-invoke", "--project", "p1", "--run", run_id),
        *("--tool", "builtin.file.write", "--content-file", str(content)),
        *traceparent,
        "--json",
    )
    if done.returncode != 0 or not tick:
        return done, json.loads(done.stdout) if done.returncode == 0 else None
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"succeeded": 1}, ticked
    return done, json.loads(done.stdout)


async def test_a_tool_step_joins_the_trace_it_was_submitted_under(
    traced: tuple[Target, otlp_receiver.Receiver],
) -> None:
    t, receiver = traced
    _, out = await anyio.to_thread.run_sync(_tool_step, t, "--traceparent", GIVEN)
    dispatch_id = out["dispatch_id"]

    def claimed() -> list[otlp_receiver.Received]:
        return [s for s in receiver.of_dispatch(dispatch_id) if s.name == "dispatch.claim"]

    def under(span: otlp_receiver.Received) -> set[str]:
        return {s.name for s in receiver.spans if s.parent_span_id == span.span_id}

    await receiver.wait_for(lambda: any(len(under(c)) == 2 for c in claimed()))
    assert receiver.refused == 0
    (submit,) = [
        s
        for s in receiver.named("approval.submit")
        if s.attributes["qinglong.action_type"] == "tool.invoke"
    ]
    assert (submit.trace_id, submit.parent_span_id) == (TRACE, CALLER_SPAN)
    assert submit.attributes["qinglong.dispatch_id"] == dispatch_id
    assert submit.attributes["qinglong.project_id"] == "p1"
    (claim,) = claimed()
    assert (claim.trace_id, claim.parent_span_id, claim.links) == (TRACE, submit.span_id, ())
    assert claim.attributes["qinglong.action_type"] == "tool.invoke"
    assert claim.attributes["qinglong.outcome"] == "succeeded"
    # The step completes in its execute's own transaction (the StepRun with the execution).
    assert under(claim) == {"dispatch.start_barrier", "dispatch.execute"}
    # Ids and names, never the content.
    values = [str(v) for s in receiver.spans for v in s.attributes.values()]
    assert not [v for v in values if "traced" in v]


async def test_a_tool_step_with_a_bad_traceparent_is_one_line_and_writes_nothing(
    traced: tuple[Target, otlp_receiver.Receiver],
) -> None:
    t, _ = traced
    done, out = await anyio.to_thread.run_sync(
        _tool_step, t, "--traceparent", "00-zz-00f067aa0ba902b7-01"
    )
    assert out is None
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "traceparent: not a W3C trace context" in lines[0]
    assert "Traceback" not in done.stderr
    status = json_out(t.run(t.runtime, "status", "--json"))
    assert sum(status["executions"].values()) == 1  # the Run's dispatch alone
    assert status["step_runs"].get("waiting_approval", 0) == 0


def _resolved_by_the_cli(t: Target) -> str:
    """A tool step submitted under GIVEN whose process was SIGKILLed after its file was
    written (`tests.support.tool_crash`), left `recovery_required` (no tick settles it by its
    evidence first), then `recovery resolve` by the operator's login: its dispatch id."""
    _, out = _tool_step(t, "--traceparent", GIVEN, tick=False)
    login = dict(zip(t.runtime[::2], t.runtime[1::2], strict=True))
    settings = {
        "QINGLONG_PROFILE": login.get("--profile", "edge"),
        "QINGLONG_DATABASE_URL": login["--database"],
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("QINGLONG_", "OTEL_"))}
    victim = subprocess.run(
        [sys.executable, "-m", "tests.support.tool_crash"],
        cwd=REPO,
        env={**clean, **t.env, **settings, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert victim.returncode == -signal.SIGKILL, victim.stderr
    time.sleep(1.2)  # the dead process's lease (1 s) runs out: recovery_required
    operator = t.runtime
    if t.database is not None:
        operator = ["--profile", "cluster", "--database", stores.operator_url(t.database)]
    resolve = ("recovery", "resolve", out["dispatch_id"], "--as", "succeeded")
    done = t.run(operator, *resolve, "--operator", "ops-on-call", "--reason", "checked")
    assert done.returncode == 0, done.stderr
    return str(out["dispatch_id"])


async def test_a_resolution_by_the_cli_is_a_child_of_the_request_in_its_trace(
    traced: tuple[Target, otlp_receiver.Receiver],
) -> None:
    t, receiver = traced
    dispatch_id = await anyio.to_thread.run_sync(_resolved_by_the_cli, t)
    await receiver.wait_for(lambda: bool(receiver.named("recovery.resolve")))
    (submit,) = [s for s in receiver.of_dispatch(dispatch_id) if s.name == "approval.submit"]
    (resolved,) = receiver.named("recovery.resolve")
    assert (resolved.trace_id, resolved.parent_span_id, resolved.links) == (
        TRACE,
        submit.span_id,
        (),
    )
    assert {k: resolved.attributes[f"qinglong.{k}"] for k in KEYS} == {
        "dispatch_id": dispatch_id,
        "action_type": "tool.invoke",
        "resolution": "succeeded",
        "principal": "ops-on-call",
        "outcome": "resolved_succeeded",
    }
    assert receiver.refused == 0


KEYS = ("dispatch_id", "action_type", "resolution", "principal", "outcome")


@pytest.fixture
def exporting(
    receiver: otlp_receiver.Receiver, monkeypatch: pytest.MonkeyPatch
) -> Iterator[otel_traces.OtelTracer]:
    """This process's tracer, exporting to `receiver` (the API in it and the use cases)."""
    for key, value in otlp_receiver.exporting_env(receiver).items():
        monkeypatch.setenv(key, value)
    tracer = otel_traces.open_tracer()
    previous = tracing.install(tracer)
    try:
        yield tracer
    finally:
        tracing.install(previous)


@pytest.fixture
async def receiver() -> AsyncIterator[otlp_receiver.Receiver]:
    async with otlp_receiver.serving() as made:
        yield made


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def test_a_resolution_by_hand_is_a_child_of_the_request_naming_outcome_and_principal(
    served: Served, receiver: otlp_receiver.Receiver, exporting: otel_traces.OtelTracer
) -> None:
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    plans = [
        api.run_create_plan({"projectId": "p1", "taskId": f"task-{i}", "taskRevision": i})
        for i in range(4)
    ]
    consumed = await make_api(it.harness.approver_store, past).submit(
        plans, requested_by="tester", approved_by="approver", traceparent=GIVEN
    )
    stuck = [(await started_execution(it.harness, past))[0].dispatch_id for _ in consumed]
    by_cli, by_api, *in_bulk = stuck
    # `recovery resolve` runs this use case as the operator's login.
    await resolving.resolve_manually(
        it.harness.operator_store,
        it.clock,
        by_cli,
        resolution=states.Completion.FAILED,
        operator="ops-on-call",
        reason="checked_downstream",
    )
    body = {"as": "succeeded", "reason": "checked", "comment": COMMENT}
    status, _, answer = await it.call("POST", f"/recovery/{by_api}/resolve", "carol", body)
    assert status == 200, answer
    status, _, answer = await it.call(
        "POST",
        "/recovery/settle",
        "carol",
        {"dispatch_ids": [*in_bulk, by_api], "as": "blocked", "reason": "checked"},
    )
    assert status == 200, answer
    await anyio.to_thread.run_sync(exporting.shutdown)  # every span exported

    (submit,) = receiver.named("approval.submit")
    assert (submit.trace_id, submit.parent_span_id) == (TRACE, CALLER_SPAN)
    resolved = receiver.named("recovery.resolve")
    assert len(resolved) == 5
    for span in resolved:
        # A child of the request's span, as a vote is: never a new trace.
        assert (span.trace_id, span.parent_span_id, span.links) == (TRACE, submit.span_id, ())
        assert span.attributes["qinglong.action_type"] == "run.create"
        assert span.attributes["qinglong.project_id"] == "p1"
    by_dispatch = {
        (s.attributes["qinglong.dispatch_id"], s.attributes["qinglong.outcome"]): s
        for s in resolved
    }
    carol = it.names["carol"]
    assert {
        key: (s.attributes["qinglong.resolution"], s.attributes["qinglong.principal"])
        for key, s in by_dispatch.items()
    } == {
        (by_cli, "resolved_failed"): ("failed", "ops-on-call"),
        (by_api, "resolved_succeeded"): ("succeeded", carol),
        (in_bulk[0], "resolved_blocked"): ("blocked", carol),
        (in_bulk[1], "resolved_blocked"): ("blocked", carol),
        # Settled already: refused, and said so.
        (by_api, "refused"): ("blocked", carol),
    }
    values = [str(v) for s in receiver.spans for v in s.attributes.values()]
    assert not [v for v in values if COMMENT in v or any(x in v for x in it.secrets.values())]
    assert receiver.refused == 0
