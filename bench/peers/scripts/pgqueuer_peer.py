"""The pgqueuer peer: `python pgqueuer_peer.py JOBS [BATCH_SIZE]`, PEER_DSN in the environment.

On the scratch database PEER_DSN names: pgqueuer's schema by its own `Queries.install()`, JOBS
no-op jobs through its public `Queries.enqueue`, then a worker process of its own drains them
while this process polls its status (`Queries.queue_size()`: a job leaves the queue table when
its completion is logged). Prints one JSON line; exits 1 with one line on stderr on a fault.

The worker (`python pgqueuer_peer.py worker [BATCH_SIZE]`) is `pgqueuer.run(worker)`, which
pgqueuer documents as what `pgqueuer run pgqueuer_peer:worker` does, on uvloop as that command
runs it, with its defaults (batch size 10) or `batch_size=BATCH_SIZE`. The command itself is not
used: its log-level option fails under the current typer (pgqueuer 1.6.0, typer 0.29).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer, Queries

ENTRYPOINT = "noop"
CHUNK = 1_000
"""Jobs per `enqueue` call (its list form: one round trip a chunk)."""
POLL_S = 0.01
WAIT_S = 600.0
DSN_VARIABLE = "PEER_DSN"


async def _noop(job: Any) -> None:
    """The job does nothing: what is measured is the queue's own cost per job."""


@contextlib.asynccontextmanager
async def worker() -> AsyncIterator[Any]:
    """The factory `pgqueuer run` enters: one connection, one entrypoint, nothing tuned."""
    connection = await asyncpg.connect(os.environ[DSN_VARIABLE])
    try:
        pgq = PgQueuer.from_asyncpg_connection(connection)
        pgq.entrypoint(ENTRYPOINT)(_noop)
        yield pgq
    finally:
        await connection.close()


def _run_worker(batch_size: int | None) -> None:
    """The worker process: until SIGINT or SIGTERM (pgqueuer's own handlers)."""
    tuned = {} if batch_size is None else {"batch_size": batch_size}
    running = pgqueuer.run(worker, **tuned)
    try:
        import uvloop
    except ImportError:
        asyncio.run(running)
    else:
        uvloop.run(running)


def _start_worker(batch_size: int | None) -> subprocess.Popen[bytes]:
    tail = [] if batch_size is None else [str(batch_size)]
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "worker", *tail],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGINT (its graceful stop), then SIGKILL after 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _poll(queries: Any, jobs: int, process: subprocess.Popen[bytes]) -> list[list[float]]:
    """(seconds since the worker started, jobs completed) until every job is done."""
    begun = time.monotonic()
    samples: list[list[float]] = []
    while True:
        remaining = sum(row.count for row in await queries.queue_size())
        elapsed = time.monotonic() - begun
        samples.append([round(elapsed, 4), jobs - remaining])
        if remaining == 0:
            return samples
        if process.poll() is not None:
            raise RuntimeError(f"the pgqueuer worker exited ({process.returncode})")
        if elapsed > WAIT_S:
            raise RuntimeError(f"{remaining} pgqueuer jobs still queued after {WAIT_S:g} s")
        await asyncio.sleep(POLL_S)


async def _measure(jobs: int, batch_size: int | None) -> dict[str, Any]:
    connection = await asyncpg.connect(os.environ[DSN_VARIABLE])
    try:
        queries = Queries.from_asyncpg_connection(connection)
        await queries.install()
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            size = min(CHUNK, jobs - first)
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
        enqueue_s = time.perf_counter() - started
        process = _start_worker(batch_size)
        try:
            samples = await _poll(queries, jobs, process)
        finally:
            _stop(process)
    finally:
        await connection.close()
    return {"jobs": jobs, "enqueue_per_s": jobs / enqueue_s, "samples": samples}


def main() -> None:
    if sys.argv[1] == "worker":
        _run_worker(int(sys.argv[2]) if len(sys.argv) > 2 else None)
        return
    jobs = int(sys.argv[1])
    batch_size = int(sys.argv[2]) if len(sys.argv) > 2 else None
    try:
        report = asyncio.run(_measure(jobs, batch_size))
    except Exception as exc:
        # The DSN may carry the administrator's password: never in the line we print.
        said = str(exc).replace(os.environ.get(DSN_VARIABLE) or "\0", "<PEER_DSN>")
        print(f"pgqueuer peer: {exc.__class__.__name__}: {said}"[:300], file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
