"""The mixed HTTP phase: 90 % `run.create`, 10 % `http.request` to a local receiver process.

The `http.request` items are spread round-robin over `RECEIVERS` receiver names, all of them
the one local process: a receiver name is a target (one change at a time), and real users
address many receivers, so one name would measure a queue on one target instead of the path.

The batch is drained by the same replica processes as the dispatch phase. The receiver
(`bench.receiver`) is started here as its own process on 127.0.0.1 and stopped whatever
happens; its CPU is read from /proc by pid around the timed drain. The send latency of each
`http.request` is the receiver's arrival stamp minus the dispatcher's start barrier (the
`→ executing` ledger line, the database clock): both are the wall clock of this machine.
aiohttp is never imported into this process: the receiver is asked for its figures with the
standard library's client.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.actions import builtin, http_request
from qinglong_dispatcher.bench import costs, mixed, phases, procstat
from qinglong_dispatcher.bench.scratch import Scratch
from qinglong_dispatcher.domain import errors, ids, plans
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus

PROJECT = "mixed-http"
RECEIVER = "bench"
RECEIVERS = 16
"""How many receiver names (`bench-0` …) the requests go to, each one target."""
PATH = "/bench/effects"
STATS_PATH = "/_bench/stats"
"""`receiver.STATS_PATH`, spelled again: importing the receiver here would load aiohttp."""
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
STATS_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Receiver:
    """A running receiver process."""

    pid: int
    port: int

    @property
    def url(self) -> str:
        """The receiver's origin."""
        return f"http://127.0.0.1:{self.port}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _port(port_file: Path, process: subprocess.Popen[bytes]) -> int:
    """The port the receiver wrote once it accepts connections."""
    written = anyio.Path(port_file)
    with anyio.move_on_after(START_TIMEOUT_S):
        while process.poll() is None:
            if await written.exists():
                return int(await written.read_text(encoding="ascii"))
            await anyio.sleep(0.02)
    raise errors.StoreError(
        f"the bench receiver did not start (exit {process.poll()}; see its log)",
        code="bench_receiver_failed",
    )


def _spawn(workdir: Path, port_file: Path) -> subprocess.Popen[bytes]:
    with (workdir / "receiver.log").open("wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "qinglong_dispatcher.bench.receiver",
                *("--port-file", str(port_file), "--parent-pid", str(os.getpid())),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@contextlib.asynccontextmanager
async def receiver(workdir: Path) -> AsyncIterator[Receiver]:
    """Start the receiver process and stop it on the way out, however that is."""
    port_file = workdir / "receiver.port"
    port_file.unlink(missing_ok=True)  # a port written by an earlier receiver is not this one's
    process = _spawn(workdir, port_file)
    try:
        yield Receiver(pid=process.pid, port=await _port(port_file, process))
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_stop, process)


def fetch_stats(port: int) -> dict[str, Any]:
    """What the receiver counted (`GET /_bench/stats`)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=STATS_TIMEOUT_S)
    try:
        connection.request("GET", STATS_PATH)
        answer = connection.getresponse()
        body = answer.read()
    finally:
        connection.close()
    if answer.status != 200:
        raise errors.StoreError(
            f"the bench receiver answered {answer.status} for its figures",
            code="bench_receiver_failed",
        )
    stats: dict[str, Any] = json.loads(body)
    return stats


def receiver_name(n: int) -> str:
    """The receiver name the `n`th http.request addresses (round-robin over `RECEIVERS`)."""
    return f"{RECEIVER}-{n % RECEIVERS}"


def receivers_toml(the_receiver: Receiver, execute_timeout_s: float) -> str:
    """The receivers file the replicas load: `RECEIVERS` names for the local receiver, which
    dedupes per key."""
    total = min(SEND_TIMEOUT_S, execute_timeout_s / 2)
    return "\n".join(
        f"""\
[receivers.{receiver_name(n)}]
base_url = "{the_receiver.url}"
methods = ["POST"]
path_prefixes = ["/bench/"]
connect_timeout_seconds = {total}
read_timeout_seconds = {total}
total_timeout_seconds = {total}

[receivers.{receiver_name(n)}.idempotency]
dedupes = true
key_retention_seconds = 3600
lookup = "replay"
"""
        for n in range(RECEIVERS)
    )


def http_plan(n: int) -> plans.AnyPlan:
    """The `n`th http.request plan: a small JSON POST, parsed as a control plane's would be."""
    body = json.dumps({"bench": n}).encode()
    return plans.parse_plan(
        http_request.ACTION_TYPE,
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": PROJECT,
            "receiver": receiver_name(n),
            "method": "POST",
            "path": PATH,
            "query": [],
            "headers": [],
            "body": base64.b64encode(body).decode("ascii"),
            "contentType": "application/json",
        },
        models=builtin.PLAN_MODELS,
    )


async def _submit(made: Scratch, count: int) -> list[str]:
    """Blocks of ten, each one submit: nine run.create and one http.request (the
    http.request dispatch ids)."""
    creates, https = mixed.split(count)
    store = await made.open()
    try:
        the_api = bootstrap.build_api(made.settings, store, clock.SystemClock())
        http_ids: list[str] = []
        for block in range(0, count, mixed.BLOCK):
            size = min(mixed.BLOCK, count - block)
            here = 1 if len(http_ids) < https else 0
            sent = http_plan(len(http_ids)) if here else None
            block_plans = phases.run_create_plans(size - here, project=PROJECT)
            consumed = await the_api.submit(
                block_plans if sent is None else [*block_plans, sent],
                requested_by="bench",
                approved_by="bench",
            )
            if sent is not None:
                http_ids += [c.dispatch_id for c in consumed if c.action_ref == sent.action_ref]
        if len(http_ids) != https or count - len(http_ids) != creates:
            raise errors.StoreError(
                "bench: the mixed http batch was not submitted whole", code="bench_unverified"
            )
        return http_ids
    finally:
        await store.close()


async def _latencies(
    store: ports.Store, http_ids: Sequence[str], arrived: dict[str, float]
) -> tuple[list[float], list[float]]:
    """Per http.request (ms): start barrier → receiver arrival, start barrier → succeeded."""
    sends: list[float] = []
    executes: list[float] = []
    for dispatch_id in http_ids:
        events = {e.to_status: e.committed_at_ms for e in await store.execution_events(dispatch_id)}
        started = events[ExecutionStatus.EXECUTING]
        sends.append(arrived[dispatch_id] * 1000 - started)
        executes.append(float(events[ExecutionStatus.SUCCEEDED] - started))
    return sends, executes


def _verify(count: int, creates: int, succeeded: int, runs: int, executed_once: int) -> None:
    https = count - creates
    if (succeeded, runs, executed_once) != (count, creates, https):
        raise errors.StoreError(
            f"bench verification failed (mixed http): {succeeded} succeeded of {count}, "
            f"{runs} Runs of {creates}, {executed_once} keys executed once of {https}",
            code="bench_unverified",
        )


async def mixed_http(made: Scratch, workdir: Path, count: int, replicas: int) -> dict[str, Any]:
    """90 % run.create and 10 % http.request drained by R replicas; every dispatch verified:
    each run.create made one Run, each http.request key was executed once by the receiver."""
    creates, _ = mixed.split(count)
    http_ids = await _submit(made, count)
    async with receiver(workdir) as the_receiver:
        config = workdir / "receivers.toml"
        config.write_text(
            receivers_toml(the_receiver, made.settings.execute_timeout), encoding="utf-8"
        )
        before = procstat.of_pid(the_receiver.pid)
        async with costs.measured(made) as server:
            results, elapsed = await phases.drain(made, replicas, receivers_file=str(config))
        after = procstat.of_pid(the_receiver.pid)
        stats = await anyio.to_thread.run_sync(fetch_stats, the_receiver.port)
    executed: dict[str, int] = stats["executed"]
    executed_once = sum(1 for d in http_ids if executed.get(d) == 1)
    if len(executed) != len(http_ids):
        executed_once = -1  # a key the bench never submitted was executed
    store = await made.open()
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
        _verify(
            count,
            creates,
            counts.executions[EffectiveStatus.SUCCEEDED],
            counts.runs,
            executed_once,
        )
        sends, executes = await _latencies(store, http_ids, stats["arrived"])
    finally:
        await store.close()
    requests = int(stats["requests"])
    return {
        **phases.figures(results, count, elapsed),
        "run_create": creates,
        "http_request": len(http_ids),
        "receivers": min(RECEIVERS, len(http_ids)),
        "succeeded": counts.executions[EffectiveStatus.SUCCEEDED],
        "runs_created": counts.runs,
        "receiver_requests": requests,
        "receiver_replayed": int(stats["replayed"]),
        "keys_executed_once": executed_once,
        "send_p50_ms": phases.percentile(sends, 0.50),
        "send_p99_ms": phases.percentile(sends, 0.99),
        "execute_p50_ms": phases.percentile(executes, 0.50),
        "execute_p99_ms": phases.percentile(executes, 0.99),
        "receiver_cpu_s_per_1000": (after.cpu_s - before.cpu_s) / max(requests, 1) * 1000,
        "receiver_rss_mib": after.rss_mib,
        "costs": costs.per_dispatch(server, results, count),
    }
