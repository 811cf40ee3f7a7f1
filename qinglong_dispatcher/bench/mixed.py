"""The mixed phase: nine in ten dispatches `run.create`, one in ten `tool.invoke`
(`builtin.file.write` into a sandbox under the bench's work folder), drained by the same
replica processes as the dispatch phase and verified afterwards.

Each tool step needs a live Run: one queued Run per tool step is created (and drained by one
replica) before the timed window, so no two tool steps move the same Run. The batch is
then submitted through the real API in blocks of ten, nine `run.create` and one `tool.invoke`,
so the claimed pages hold both kinds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio.to_thread

from qinglong_dispatcher import api, bootstrap, clock, ports
from qinglong_dispatcher.actions.run_create import tables as run_create_tables
from qinglong_dispatcher.actions.tool_invoke import tables as tool_invoke_tables
from qinglong_dispatcher.bench import costs, phases
from qinglong_dispatcher.bench.scratch import Scratch
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain.states import EffectiveStatus
from qinglong_dispatcher.domain.tools import registry as tool_registry

BLOCK = 10
"""One `tool.invoke` in every block of ten dispatches."""

PROJECT = "mixed"


def split(count: int) -> tuple[int, int]:
    """(run.create, tool.invoke) of `count` dispatches: one tool step per block of ten."""
    tools = count // BLOCK if count >= BLOCK else min(count, 1)
    return count - tools, tools


async def _submit_runs(made: Scratch, count: int) -> list[str]:
    """`count` run.create dispatches for the tool steps' Runs: their dispatch ids."""
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        consumed: list[str] = []
        for first in range(0, count, phases.SUBMIT_CHUNK):
            batch = await the_api.submit(
                phases.run_create_plans(min(phases.SUBMIT_CHUNK, count - first), project=PROJECT),
                requested_by="bench",
                approved_by="bench",
            )
            consumed.extend(c.dispatch_id for c in batch)
        return consumed
    finally:
        await store.close()


async def _run_ids(store: ports.Store, dispatch_ids: list[str]) -> list[str]:
    """The Run each drained run.create made (the Run's idempotency key is the dispatch id)."""
    run_ids = []
    runs = run_create_tables.Repository(store)
    for dispatch_id in dispatch_ids:
        run = await runs.get_run_by_key(PROJECT, dispatch_id)
        if run is None:
            raise errors.StoreError(
                "bench: a run.create of the mixed phase made no Run", code="bench_unverified"
            )
        run_ids.append(run.run_id)
    return run_ids


async def _submit_mixed(made: Scratch, store: ports.Store, count: int, run_ids: list[str]) -> None:
    """Blocks of ten through the API: nine run.create in one submit, then one tool step."""
    the_clock = clock.SystemClock()
    the_api = bootstrap.build_api(made.settings, store, the_clock)
    policy = api.Policy(
        approval_ttl_ms=int(made.settings.approval_ttl_seconds * 1000),
        max_attempts=made.settings.max_attempts,
    )
    tools = iter(run_ids)
    tools_left = len(run_ids)
    for block in range(0, count, BLOCK):
        tool_here = 1 if tools_left else 0
        creates = min(BLOCK, count - block) - tool_here
        if creates:
            await the_api.submit(
                phases.run_create_plans(creates, project=PROJECT),
                requested_by="bench",
                approved_by="bench",
            )
        if tool_here:
            tools_left -= 1
            await api.submit_tool_invocation(
                store,
                tool_invoke_tables.Repository(store),
                the_clock,
                policy,
                project_id=PROJECT,
                run_id=next(tools),
                tool_id=tool_registry.TOOL_FILE_WRITE,
                content=f"qinglong bench, block {block // BLOCK}\n",
                requested_by="bench",
                approved_by="bench",
            )


def _files(project_dir: Path) -> int:
    return sum(1 for _ in project_dir.iterdir()) if project_dir.is_dir() else 0


async def mixed(made: Scratch, workdir: Path, count: int, replicas: int) -> dict[str, Any]:
    """90 % run.create and 10 % tool.invoke drained by R replicas; every dispatch verified:
    each run.create made one Run, each tool step succeeded and wrote its one file."""
    creates, tools = split(count)
    sandbox_dir = workdir / "tool-sandbox"
    sandbox_dir.mkdir()
    replica_settings = {"tool_sandbox_dir": str(sandbox_dir.resolve())}
    # The tool steps' Runs, created by one replica before the timed window.
    prepared = await _submit_runs(made, tools)
    await phases.drain(made, 1, **replica_settings)
    store = await made.open()
    try:
        run_ids = await _run_ids(store, prepared)
        before = await store.counts(now_ms=clock.SystemClock().now_ms())
        if before.executions[EffectiveStatus.SUCCEEDED] != tools or before.runs != tools:
            raise errors.StoreError(
                "bench: the Runs for the mixed phase's tool steps were not all created",
                code="bench_unverified",
            )
        await _submit_mixed(made, store, count, run_ids)
    finally:
        await store.close()
    async with costs.measured(made) as server:
        results, elapsed = await phases.drain(made, replicas, **replica_settings)
    store = await made.open()
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
    finally:
        await store.close()
    succeeded = counts.executions[EffectiveStatus.SUCCEEDED] - tools
    runs = counts.runs - tools
    steps = counts.step_runs.get("succeeded", 0)
    written = await anyio.to_thread.run_sync(_files, sandbox_dir / PROJECT)
    if (succeeded, runs, steps, written) != (count, creates, tools, tools):
        raise errors.StoreError(
            f"bench verification failed (mixed): {succeeded} succeeded of {count}, "
            f"{runs} Runs of {creates}, {steps} tool steps succeeded and {written} files "
            f"of {tools}",
            code="bench_unverified",
        )
    return {
        **phases.figures(results, count, elapsed),
        "run_create": creates,
        "tool_invoke": tools,
        "succeeded": succeeded,
        "runs_created": runs,
        "tool_steps_succeeded": steps,
        "files_written": written,
        "costs": costs.per_dispatch(server, results, count),
    }
