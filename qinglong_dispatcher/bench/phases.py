"""The bench's measurements, each on a scratch store: raw commits, enqueue, dispatch by
replica processes, the trickle latency of the real daemon (at a 0.05 s cadence, and on
cluster at its own cadence with and without the wake-up on submit), the due-scan cost,
idle cost."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from qinglong_dispatcher import api, bootstrap, clock, ports
from qinglong_dispatcher.bench import costs, dialects, procstat
from qinglong_dispatcher.bench.scratch import Scratch
from qinglong_dispatcher.domain import errors, plans
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus

SUBMIT_CHUNK = 1_000
TRICKLE_WAIT_S = 180
LISTENING_WAIT_S = 30
SCAN_PAGES = 5
PAGE = 64


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env.pop("NOTIFY_SOCKET", None)
    env.update(extra)
    return env


def run_create_plans(count: int, *, project: str = "bench") -> list[plans.AnyPlan]:
    """`count` valid run.create plans."""
    return [
        api.run_create_plan({"projectId": project, "taskId": f"t-{i}", "taskRevision": i})
        for i in range(count)
    ]


async def raw_commits(made: Scratch, seconds: float) -> tuple[float, float | None]:
    """(through the store's own path, through stdlib sqlite3 or None on PostgreSQL)."""
    return await dialects.of(made.settings).raw_commits(seconds)


async def enqueue(made: Scratch, count: int) -> float:
    """Approvals created, approved and consumed through the real API, per second."""
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        plan_list = run_create_plans(count)
        started = time.perf_counter()
        for first in range(0, count, SUBMIT_CHUNK):
            await the_api.submit(
                plan_list[first : first + SUBMIT_CHUNK], requested_by="bench", approved_by="bench"
            )
        return count / (time.perf_counter() - started)
    finally:
        await store.close()


async def submit_one(made: Scratch, count: int) -> float:
    """Plans submitted one at a time through the real API (a transaction each), per second."""
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        plan_list = run_create_plans(count, project="one-at-a-time")
        started = time.perf_counter()
        for plan in plan_list:
            await the_api.submit([plan], requested_by="bench", approved_by="bench")
        elapsed = time.perf_counter() - started
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
        if sum(counts.executions.values()) != count:
            raise errors.StoreError(
                "bench: a plan submitted one at a time made no execution", code="bench_unverified"
            )
        return count / elapsed
    finally:
        await store.close()


async def drain(
    made: Scratch, replicas: int, **settings: str
) -> tuple[list[dict[str, float]], float]:
    """R replica processes drain the scratch store together (`settings` are extra
    `QINGLONG_*` for them): each replica's report, and the wall time from first to last."""
    start_at = time.time() + 1.5  # imports and pools first, then all begin together
    results: list[dict[str, float]] = []

    async def replica(n: int) -> None:
        done = await anyio.run_process(
            [sys.executable, "-m", "qinglong_dispatcher.bench.replica", str(start_at)],
            env=_child_env(made.env(owner_id=f"bench-{n}", **settings)),
            stderr=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0:
            raise errors.StoreError("a bench replica failed", code="bench_replica_failed")
        results.append(json.loads(done.stdout))

    async with anyio.create_task_group() as tg:
        for n in range(replicas):
            tg.start_soon(replica, n)
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return results, elapsed


def figures(results: Sequence[dict[str, float]], count: int, elapsed: float) -> dict[str, float]:
    """Throughput, commits per dispatch, the worst replica's CPU per 1,000 and peak RSS."""
    dispatched = sum(r["dispatched"] for r in results)
    return {
        "dispatch_per_s": count / elapsed,
        "commits_per_dispatch": sum(r["commits"] for r in results) / count,
        "cpu_s_per_1000": max(
            r["cpu_s"] / max(r["dispatched"], 1) * 1000 for r in results if r["dispatched"]
        )
        if dispatched
        else 0.0,
        "rss_mib_peak": max(r["rss_mib"] for r in results),
    }


async def dispatch(made: Scratch, count: int, replicas: int) -> dict[str, Any]:
    """R replica processes drain everything; every dispatch verified succeeded with one Run.
    With the figures, `costs`: what a dispatch cost the server or the store (`bench.costs`)."""
    async with costs.measured(made) as server:
        results, elapsed = await drain(made, replicas)
    store = await made.open()
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
    finally:
        await store.close()
    succeeded = counts.executions[EffectiveStatus.SUCCEEDED]
    if succeeded != count or counts.runs != count:
        raise errors.StoreError(
            f"bench verification failed: {succeeded} succeeded, {counts.runs} runs of {count}",
            code="bench_unverified",
        )
    return {**figures(results, count, elapsed), "costs": costs.per_dispatch(server, results, count)}


def start_daemon(made: Scratch, log: Path, **settings: str) -> subprocess.Popen[bytes]:
    """A `run` daemon on the scratch store (`settings`: more `QINGLONG_*`), logging to `log`."""
    with log.open("wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "qinglong_dispatcher", "run"],
            env=_child_env(made.env(metrics_port="0", **settings)),
            stdout=subprocess.DEVNULL,
            stderr=handle,
        )


def stop_daemon(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the drain outlasts a minute."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values` at the nearest index of the sorted list (not empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _logged(log: Path, event: str) -> None:
    """Wait until the daemon's JSON log holds `event` (the wake-up listener subscribed)."""
    with anyio.move_on_after(LISTENING_WAIT_S):
        while True:
            if f'"{event}"' in await anyio.Path(log).read_text("utf-8", errors="replace"):
                return
            await anyio.sleep(0.05)
    raise errors.StoreError(f"the bench daemon never logged {event}", code="bench_daemon_failed")


async def trickle(
    made: Scratch,
    workdir: Path,
    *,
    seconds: float,
    rate: float,
    name: str = "trickle",
    **settings: str,
) -> dict[str, float]:
    """The real daemon (by default at a 0.05 s cadence without the wake-up; `settings` are its
    `QINGLONG_*`), fed at a steady rate; latencies from the ledger."""
    log = workdir / f"{name}.log"
    # The historical figure: the cadence alone (no wake-up), so runs stay comparable.
    defaults = {"cadence_seconds": "0.05", "wakeup_on_submit": "false"}
    daemon = start_daemon(made, log, **{**defaults, **settings})
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        await anyio.sleep(1.5)  # the daemon is up and ticking
        if settings.get("wakeup_on_submit") == "true":
            await _logged(log, "wakeup.listening")
        ids: list[str] = []
        begun = time.monotonic()
        for n in range(max(1, int(seconds * rate))):
            await anyio.sleep(max(0.0, begun + n / rate - time.monotonic()))
            (consumed,) = await the_api.submit(
                run_create_plans(1, project="trickle"), requested_by="bench", approved_by="bench"
            )
            ids.append(consumed.dispatch_id)
        with anyio.move_on_after(TRICKLE_WAIT_S):
            while True:
                rows = [await store.get_execution(i) for i in ids]
                if all(r is not None and r.status is ExecutionStatus.SUCCEEDED for r in rows):
                    break
                await anyio.sleep(0.05)
        if not all(r is not None and r.status is ExecutionStatus.SUCCEEDED for r in rows):
            raise errors.StoreError(
                f"the trickle daemon did not finish {len(ids)} dispatches in {TRICKLE_WAIT_S} s",
                code="bench_unverified",
            )
        starts, completes = [], []
        for dispatch_id in ids:
            events = {
                e.to_status: e.committed_at_ms for e in await store.execution_events(dispatch_id)
            }
            eligible = events[ExecutionStatus.PENDING]
            # A passage starts and completes at once (decision 0055): its one line is both.
            started = events.get(ExecutionStatus.EXECUTING, events[ExecutionStatus.SUCCEEDED])
            starts.append(started - eligible)
            completes.append(events[ExecutionStatus.SUCCEEDED] - eligible)
    finally:
        await store.close()
        await anyio.to_thread.run_sync(stop_daemon, daemon)
    return {
        "start_p50": percentile(starts, 0.50),
        "start_p99": percentile(starts, 0.99),
        "complete_p50": percentile(completes, 0.50),
        "complete_p99": percentile(completes, 0.99),
    }


async def wakeup_latency(
    made: Scratch, workdir: Path, *, seconds: float, rate: float
) -> dict[str, float] | None:
    """Cluster: the trickle at the profile's own cadence with the wake-up on submit, and the
    same with it off for contrast (`*_cadence_only`); None on edge, which has no wake-up."""
    if made.settings.profile != "cluster":
        return None
    cadence = made.settings.cadence_seconds
    runs = {
        on: await trickle(
            made,
            workdir,
            seconds=seconds,
            rate=rate,
            name=f"wakeup-{on}",
            cadence_seconds=str(cadence),
            wakeup_on_submit=on,
        )
        for on in ("true", "false")
    }
    return {
        "cadence_s": cadence,
        **runs["true"],
        "start_p50_cadence_only": runs["false"]["start_p50"],
        "start_p99_cadence_only": runs["false"]["start_p99"],
    }


async def idle(made: Scratch, workdir: Path, *, seconds: float) -> dict[str, float]:
    """CPU percent of one core and RSS of the real daemon with nothing to do."""
    daemon = start_daemon(made, workdir / "idle.log")
    try:
        await anyio.sleep(2.0)  # past start-up and the first tick
        if daemon.poll() is not None:
            raise errors.StoreError("the idle daemon exited", code="bench_daemon_failed")
        before = procstat.of_pid(daemon.pid)
        begun = time.monotonic()
        await anyio.sleep(seconds)
        after = procstat.of_pid(daemon.pid)
        wall = time.monotonic() - begun
    finally:
        await anyio.to_thread.run_sync(stop_daemon, daemon)
    return {"cpu_percent": (after.cpu_s - before.cpu_s) / wall * 100, "rss_mib": after.rss_mib}


async def _time_claim_pages(store: ports.Store, made: Scratch) -> float:
    """Median wall time of one `claim_due` of a full page (pages submitted just before)."""
    the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
    await the_api.submit(
        run_create_plans(PAGE * SCAN_PAGES, project="scan"),
        requested_by="bench",
        approved_by="bench",
    )
    the_clock = clock.SystemClock()
    timings = []
    for _ in range(SCAN_PAGES):
        started = time.perf_counter()
        batch = await store.claim_due(
            now_ms=the_clock.now_ms(), owner="bench-scan", limit=PAGE, lease_ms=60_000
        )
        timings.append(time.perf_counter() - started)
        if len(batch.claimed) != PAGE:
            raise errors.StoreError("scan page not full", code="bench_unverified")
    return statistics.median(timings)


async def scan_cost(made: Scratch, rows: int) -> float:
    """claim_due of a page with `rows` terminal rows present, over the same on an empty table."""
    store = await made.open()
    try:
        empty = await _time_claim_pages(store, made)
        await dialects.of(made.settings).seed_terminal_rows(
            store, rows, clock.SystemClock().now_ms()
        )
        full = await _time_claim_pages(store, made)
    finally:
        await store.close()
    return full / empty
