"""The huey peer: `python huey_peer.py JOBS WORK`, HUEY_PEER_FILE (a temp SQLite file) in the
environment, and for WORK `equal` also HUEY_PEER_APP_FILE (the application's SQLite file).

JOBS tasks enqueued through huey's public API (calling the task), then huey's own consumer
process (`huey_consumer huey_peer.huey`, one worker thread: its default) drains them while
this process polls its status (`Huey.pending_count()`). WORK names the task:

- `noop`: it does nothing, so what is measured is the queue's own cost per task;
- `equal`: what a huey user writes to get what our `run.create` gives. The task carries an
  idempotency key and, in one transaction on the application's own SQLite file (WAL,
  `synchronous=FULL` as our edge), inserts a Run under that key (unique: a task run twice
  makes one Run), its receipt and an audit row. After the drain the file is counted: one Run,
  one receipt and one audit row per task, or the run fails.

Prints one JSON line; exits 1 with one line on stderr on a fault.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from huey import SqliteHuey

POLL_S = 0.01
WAIT_S = 600.0
FILE_VARIABLE = "HUEY_PEER_FILE"
APP_FILE_VARIABLE = "HUEY_PEER_APP_FILE"
WORKS = ("noop", "equal")

# SqliteHuey's defaults (WAL, SQLite's own synchronous=FULL); the consumer imports this module
# and finds the same file through the environment.
huey = SqliteHuey(filename=os.environ.get(FILE_VARIABLE, "huey-peer.db"))

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS receipts (
    run_id INTEGER PRIMARY KEY REFERENCES runs (id),
    at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    run_id INTEGER NOT NULL REFERENCES runs (id)
);
"""
INSERT_RUN = (
    "INSERT INTO runs (idempotency_key, name, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id"
)
INSERT_RECEIPT = "INSERT INTO receipts (run_id, at, body) VALUES (?, ?, ?)"
INSERT_AUDIT = "INSERT INTO audit (at, action, run_id) VALUES (?, 'run.create', ?)"

_local = threading.local()


def _app() -> sqlite3.Connection:
    """The worker thread's connection to the application's file, opened once per thread."""
    connection: sqlite3.Connection | None = getattr(_local, "connection", None)
    if connection is None:
        connection = sqlite3.connect(os.environ[APP_FILE_VARIABLE], isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("PRAGMA busy_timeout=5000")
        _local.connection = connection
    return connection


def _noop() -> None:
    """The task does nothing: what is measured is the queue's own cost per task."""


def _create_run(key: str, name: str) -> None:
    """A Run under its idempotency key, its receipt and an audit row, in one transaction; a
    key already used makes nothing (a task run again)."""
    connection = _app()
    now = time.time()
    connection.execute("BEGIN IMMEDIATE")
    try:
        row = connection.execute(INSERT_RUN, (key, name, now)).fetchone()
        if row is not None:
            body = json.dumps({"run_id": row[0], "idempotency_key": key})
            connection.execute(INSERT_RECEIPT, (row[0], now, body))
            connection.execute(INSERT_AUDIT, (now, row[0]))
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


noop = huey.task()(_noop)
create_run = huey.task()(_create_run)


def _start_consumer() -> subprocess.Popen[bytes]:
    # Its cwd is this folder, so that the consumer imports this module as `huey_peer`.
    return subprocess.Popen(
        [sys.executable, "-m", "huey.bin.huey_consumer", "huey_peer.huey", "--workers", "1"],
        cwd=Path(__file__).resolve().parent,
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


def _poll(jobs: int, process: subprocess.Popen[bytes]) -> list[list[float]]:
    """(seconds since the consumer started, tasks completed) until every task is done."""
    begun = time.monotonic()
    samples: list[list[float]] = []
    while True:
        remaining = int(huey.pending_count())
        elapsed = time.monotonic() - begun
        samples.append([round(elapsed, 4), jobs - remaining])
        if remaining == 0:
            return samples
        if process.poll() is not None:
            raise RuntimeError(f"the huey consumer exited ({process.returncode})")
        if elapsed > WAIT_S:
            raise RuntimeError(f"{remaining} huey tasks still pending after {WAIT_S:g} s")
        time.sleep(POLL_S)


def _verify(jobs: int) -> dict[str, int]:
    """The application's rows after the drain: one Run, receipt and audit row per task."""
    connection = sqlite3.connect(os.environ[APP_FILE_VARIABLE])
    try:
        counts = {
            "runs": connection.execute("SELECT count(*) FROM runs").fetchone()[0],
            "receipts": connection.execute("SELECT count(*) FROM receipts").fetchone()[0],
            "audit": connection.execute("SELECT count(*) FROM audit").fetchone()[0],
        }
    finally:
        connection.close()
    if set(counts.values()) != {jobs}:
        raise RuntimeError(f"{jobs} tasks but {counts}")
    return counts


def _measure(jobs: int, work: str) -> dict[str, Any]:
    if work == "equal":
        connection = sqlite3.connect(os.environ[APP_FILE_VARIABLE])
        connection.executescript(SCHEMA)
        connection.close()
    started = time.perf_counter()
    for _ in range(jobs):
        if work == "equal":
            create_run(str(uuid.uuid4()), "peer")
        else:
            noop()
    enqueue_s = time.perf_counter() - started
    process = _start_consumer()
    try:
        samples = _poll(jobs, process)
    finally:
        _stop(process)
    report: dict[str, Any] = {
        "jobs": jobs,
        "work": work,
        "enqueue_per_s": jobs / enqueue_s,
        "samples": samples,
    }
    if work == "equal":
        report["verified"] = _verify(jobs)
    return report


def main() -> None:
    # The consumer imports this file as `huey_peer`: enqueue through that module too, so that
    # both name the tasks `huey_peer._noop`, `huey_peer._create_run` (run as a script, this
    # copy is `__main__`).
    peer = importlib.import_module("huey_peer")
    try:
        work = sys.argv[2] if len(sys.argv) > 2 else "noop"
        if work not in WORKS:
            raise ValueError(f"WORK must be one of {', '.join(WORKS)}")
        report = peer._measure(int(sys.argv[1]), work)
    except Exception as exc:
        print(f"huey peer: {exc.__class__.__name__}: {exc}"[:300], file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
