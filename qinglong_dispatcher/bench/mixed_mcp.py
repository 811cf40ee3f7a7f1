"""The mixed MCP phase: 90 % `run.create`, 10 % `mcp.call` to a local stdio MCP server.

The server (`bench.mcp_server`, the `mcp` SDK) is a new process for each session the replicas
open: one for each inspect and one for each execute, each a Python start (about a second on
a small machine), so this phase is sized on its own (`--mcp-dispatches`) and kept small. The
replicas load it from a servers file in the bench's work folder. Without the `[mcp]` extra
the phase is not run and the report says why. Like `mixed_http`, the batch is submitted in
blocks of ten through the API (the same small pattern, spelled here for the MCP plan) and
drained by the replica processes; afterwards every `mcp.call` key must have been called once.
The SDK is never imported into this process: only the replicas and the server load it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.actions import builtin, mcp_call
from qinglong_dispatcher.bench import costs, mixed, phases
from qinglong_dispatcher.bench.scratch import Scratch
from qinglong_dispatcher.domain import errors, ids, plans
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus

PROJECT = "mixed-mcp"
SERVER = "bench"
TOOL = "record"
CLOSE_S = 4.5
"""What closing a stdio session may take (docs/actions.md): kept out of the execute timeout."""
SDK_MODULES = ("mcp", "httpx2", "jsonschema")
"""What `mcp.call`'s client needs: the `[mcp]` extra."""


def sdk_missing() -> str | None:
    """Why the phase cannot run here (the `[mcp]` extra not installed), or None. Looked up,
    never imported."""
    absent = [name for name in SDK_MODULES if importlib.util.find_spec(name) is None]
    if not absent:
        return None
    return f"mcp_sdk_missing: {', '.join(absent)} not installed (install qinglong-dispatcher[mcp])"


def servers_toml(folder: Path, execute_timeout_s: float) -> str:
    """The servers file the replicas load: the bench server over stdio, its timeouts (with
    closing) inside the execute timeout, most of them for a Python start and `initialize`."""
    budget = execute_timeout_s - CLOSE_S - 0.5
    if budget <= 1:
        raise errors.ConfigurationError(
            f"bench: an execute timeout of {execute_timeout_s:g} s leaves no room for an MCP "
            "session (raise QINGLONG_LEASE_SECONDS)"
        )
    command = [sys.executable, "-m", "qinglong_dispatcher.bench.mcp_server", str(folder)]
    return f"""\
[servers.{SERVER}]
command = {json.dumps(command)}
tools = ["{TOOL}"]
connect_timeout_seconds = {budget * 0.2:.3f}
initialize_timeout_seconds = {budget * 0.6:.3f}
call_timeout_seconds = {budget * 0.2:.3f}
"""


def mcp_plan(n: int) -> plans.AnyPlan:
    """The `n`th mcp.call plan, parsed as a control plane's would be."""
    return plans.parse_plan(
        mcp_call.ACTION_TYPE,
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": PROJECT,
            "server": SERVER,
            "tool": TOOL,
            "arguments": {"n": n},
        },
        models=builtin.PLAN_MODELS,
    )


async def _submit(made: Scratch, count: int) -> list[str]:
    """Blocks of ten, each one submit: nine run.create and one mcp.call (the mcp.call
    dispatch ids)."""
    creates, calls = mixed.split(count)
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        mcp_ids: list[str] = []
        for block in range(0, count, mixed.BLOCK):
            size = min(mixed.BLOCK, count - block)
            here = 1 if len(mcp_ids) < calls else 0
            sent = mcp_plan(len(mcp_ids)) if here else None
            block_plans = phases.run_create_plans(size - here, project=PROJECT)
            consumed = await the_api.submit(
                block_plans if sent is None else [*block_plans, sent],
                requested_by="bench",
                approved_by="bench",
            )
            if sent is not None:
                mcp_ids += [c.dispatch_id for c in consumed if c.action_ref == sent.action_ref]
        if len(mcp_ids) != calls or count - len(mcp_ids) != creates:
            raise errors.StoreError(
                "bench: the mixed mcp batch was not submitted whole", code="bench_unverified"
            )
        return mcp_ids
    finally:
        await store.close()


async def _executes(store: ports.Store, mcp_ids: Sequence[str]) -> list[float]:
    """Per mcp.call (ms): start barrier → succeeded (the execute's session and call)."""
    executes: list[float] = []
    for dispatch_id in mcp_ids:
        events = {e.to_status: e.committed_at_ms for e in await store.execution_events(dispatch_id)}
        started = events[ExecutionStatus.EXECUTING]
        executes.append(float(events[ExecutionStatus.SUCCEEDED] - started))
    return executes


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _verify(count: int, creates: int, succeeded: int, runs: int, called_once: int) -> None:
    calls = count - creates
    if (succeeded, runs, called_once) != (count, creates, calls):
        raise errors.StoreError(
            f"bench verification failed (mixed mcp): {succeeded} succeeded of {count}, "
            f"{runs} Runs of {creates}, {called_once} keys called once of {calls}",
            code="bench_unverified",
        )


async def mixed_mcp(made: Scratch, workdir: Path, count: int, replicas: int) -> dict[str, Any]:
    """90 % run.create and 10 % mcp.call drained by R replicas; every dispatch verified: each
    run.create made one Run, the server was called once under each mcp.call key."""
    creates, _ = mixed.split(count)
    folder = workdir / "mcp-server"
    folder.mkdir(exist_ok=True)
    for name in ("calls.txt", "sessions.txt"):
        (folder / name).unlink(missing_ok=True)  # an earlier run's lines are not this one's
    config = workdir / "mcp-servers.toml"
    config.write_text(servers_toml(folder, made.settings.execute_timeout), encoding="utf-8")
    mcp_ids = await _submit(made, count)
    async with costs.measured(made) as server:
        results, elapsed = await phases.drain(made, replicas, mcp_servers_file=str(config))
    called = _lines(folder / "calls.txt")
    called_once = sum(1 for d in mcp_ids if called.count(d) == 1)
    if len(called) != len(mcp_ids):
        called_once = -1  # a key called twice, or one the bench never submitted
    store = await made.open()
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
        _verify(
            count, creates, counts.executions[EffectiveStatus.SUCCEEDED], counts.runs, called_once
        )
        executes = await _executes(store, mcp_ids)
    finally:
        await store.close()
    sessions = len(_lines(folder / "sessions.txt"))
    return {
        **phases.figures(results, count, elapsed),
        "run_create": creates,
        "mcp_call": len(mcp_ids),
        "succeeded": counts.executions[EffectiveStatus.SUCCEEDED],
        "runs_created": counts.runs,
        "keys_called_once": called_once,
        "server_calls": len(called),
        "server_sessions": sessions,
        "sessions_per_call": sessions / max(len(mcp_ids), 1),
        "execute_p50_ms": phases.percentile(executes, 0.50),
        "execute_p99_ms": phases.percentile(executes, 0.99),
        "costs": costs.per_dispatch(server, results, count),
    }
