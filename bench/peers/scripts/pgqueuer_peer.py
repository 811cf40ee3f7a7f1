"""The pgqueuer peer: `python pgqueuer_peer.py JOBS WORK [BATCH_SIZE]`, PEER_DSN in the
environment.

On the scratch database PEER_DSN names: pgqueuer's schema by its own `Queries.install()`, JOBS
jobs through its public `Queries.enqueue`, then a worker process of its own drains them while
this process polls its status (`Queries.queue_size()`: a job leaves the queue table when its
completion is logged). WORK names the job:

- `noop`: it does nothing, so what is measured is the queue's own cost per job;
- `equal`: what a pgqueuer user writes to get what our `run.create` gives. The job's payload
  is an idempotency key, and the job, on a connection of its own (from an asyncpg pool the
  worker's factory opens beside pgqueuer's connection: pgqueuer runs a batch's jobs
  concurrently), inserts in one transaction a Run under that key (unique: a job run twice
  makes one Run), its receipt and an audit row, in tables of the same database. After the
  drain they are counted: one Run, one receipt and one audit row per job, or the run fails.

Prints one JSON line; exits 1 with one line on stderr on a fault.

The worker (`python pgqueuer_peer.py worker WORK [BATCH_SIZE]`) is `pgqueuer.run(worker)`, which
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
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer, Queries

WORKS = ("noop", "equal")
CHUNK = 1_000
"""Jobs per `enqueue` call (its list form: one round trip a chunk)."""
POLL_S = 0.01
WAIT_S = 600.0
DSN_VARIABLE = "PEER_DSN"
WORK_VARIABLE = "PEER_WORK"
"""How the worker's factory (which `pgqueuer.run` calls without arguments) learns WORK."""

SCHEMA = """
CREATE TABLE runs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL UNIQUE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE receipts (
    run_id bigint PRIMARY KEY REFERENCES runs (id),
    at timestamptz NOT NULL DEFAULT now(),
    body jsonb NOT NULL
);
CREATE TABLE audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    action text NOT NULL,
    run_id bigint NOT NULL REFERENCES runs (id)
);
"""
INSERT_RUN = (
    "INSERT INTO runs (idempotency_key, name) VALUES ($1, $2) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)
INSERT_RECEIPT = "INSERT INTO receipts (run_id, body) VALUES ($1, $2::jsonb)"
INSERT_AUDIT = "INSERT INTO audit (action, run_id) VALUES ('run.create', $1)"


async def _noop(job: Any) -> None:
    """The job does nothing: what is measured is the queue's own cost per job."""


def _create_run(pool: Any) -> Any:
    async def create_run(job: Any) -> None:
        """A Run under the job's idempotency key, its receipt and an audit row, in one
        transaction; a key already used makes nothing (a job run again)."""
        key = job.payload.decode("utf-8")
        async with pool.acquire() as connection, connection.transaction():
            run_id = await connection.fetchval(INSERT_RUN, key, "peer")
            if run_id is not None:
                body = json.dumps({"run_id": run_id, "idempotency_key": key})
                await connection.execute(INSERT_RECEIPT, run_id, body)
                await connection.execute(INSERT_AUDIT, run_id)

    return create_run


@contextlib.asynccontextmanager
async def worker() -> AsyncIterator[Any]:
    """The factory `pgqueuer run` enters: one connection, one entrypoint, nothing tuned (and
    for `equal` work an asyncpg pool with its defaults for the jobs' own transactions)."""
    work = os.environ.get(WORK_VARIABLE, "noop")
    connection = await asyncpg.connect(os.environ[DSN_VARIABLE])
    pool = await asyncpg.create_pool(os.environ[DSN_VARIABLE]) if work == "equal" else None
    try:
        pgq = PgQueuer.from_asyncpg_connection(connection)
        pgq.entrypoint(work)(_noop if pool is None else _create_run(pool))
        yield pgq
    finally:
        if pool is not None:
            await pool.close()
        await connection.close()


def _run_worker(work: str, batch_size: int | None) -> None:
    """The worker process: until SIGINT or SIGTERM (pgqueuer's own handlers)."""
    os.environ[WORK_VARIABLE] = work
    tuned = {} if batch_size is None else {"batch_size": batch_size}
    running = pgqueuer.run(worker, **tuned)
    try:
        import uvloop
    except ImportError:
        asyncio.run(running)
    else:
        uvloop.run(running)


def _start_worker(work: str, batch_size: int | None) -> subprocess.Popen[bytes]:
    tail = [] if batch_size is None else [str(batch_size)]
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "worker", work, *tail],
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


def _payloads(work: str, size: int) -> list[bytes | None]:
    if work == "equal":
        return [str(uuid.uuid4()).encode("utf-8") for _ in range(size)]
    return [None] * size


async def _verify(connection: Any, jobs: int) -> dict[str, int]:
    """The application's rows after the drain: one Run, receipt and audit row per job."""
    counts = {
        table: int(await connection.fetchval(f"SELECT count(*) FROM {table}"))
        for table in ("runs", "receipts", "audit")
    }
    if set(counts.values()) != {jobs}:
        raise RuntimeError(f"{jobs} jobs but {counts}")
    return counts


async def _measure(jobs: int, work: str, batch_size: int | None) -> dict[str, Any]:
    connection = await asyncpg.connect(os.environ[DSN_VARIABLE])
    try:
        queries = Queries.from_asyncpg_connection(connection)
        await queries.install()
        if work == "equal":
            await connection.execute(SCHEMA)
        started = time.perf_counter()
        for first in range(0, jobs, CHUNK):
            size = min(CHUNK, jobs - first)
            await queries.enqueue([work] * size, _payloads(work, size), [0] * size)
        enqueue_s = time.perf_counter() - started
        process = _start_worker(work, batch_size)
        try:
            samples = await _poll(queries, jobs, process)
        finally:
            _stop(process)
        report: dict[str, Any] = {
            "jobs": jobs,
            "work": work,
            "enqueue_per_s": jobs / enqueue_s,
            "samples": samples,
        }
        if work == "equal":
            report["verified"] = await _verify(connection, jobs)
    finally:
        await connection.close()
    return report


def main() -> None:
    if sys.argv[1] == "worker":
        _run_worker(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
        return
    try:
        jobs = int(sys.argv[1])
        work = sys.argv[2] if len(sys.argv) > 2 else "noop"
        if work not in WORKS:
            raise ValueError(f"WORK must be one of {', '.join(WORKS)}")
        batch_size = int(sys.argv[3]) if len(sys.argv) > 3 else None
        report = asyncio.run(_measure(jobs, work, batch_size))
    except Exception as exc:
        # The DSN may carry the administrator's password: never in the line we print.
        said = str(exc).replace(os.environ.get(DSN_VARIABLE) or "\0", "<PEER_DSN>")
        print(f"pgqueuer peer: {exc.__class__.__name__}: {said}"[:300], file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
