"""The huey peer: `python huey_peer.py JOBS`, HUEY_PEER_FILE (a temp SQLite file) in the
environment.

JOBS no-op tasks enqueued through huey's public API (calling the task), then huey's own
consumer process (`huey_consumer huey_peer.huey`, one worker thread: its default) drains them
while this process polls its status (`Huey.pending_count()`). Prints one JSON line; exits 1
with one line on stderr on a fault.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from huey import SqliteHuey

POLL_S = 0.01
WAIT_S = 600.0
FILE_VARIABLE = "HUEY_PEER_FILE"

# SqliteHuey's defaults (WAL, SQLite's own synchronous=FULL); the consumer imports this module
# and finds the same file through the environment.
huey = SqliteHuey(filename=os.environ.get(FILE_VARIABLE, "huey-peer.db"))


def _noop() -> None:
    """The task does nothing: what is measured is the queue's own cost per task."""


noop = huey.task()(_noop)


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


def _measure(jobs: int) -> dict[str, Any]:
    started = time.perf_counter()
    for _ in range(jobs):
        noop()
    enqueue_s = time.perf_counter() - started
    process = _start_consumer()
    try:
        samples = _poll(jobs, process)
    finally:
        _stop(process)
    return {"jobs": jobs, "enqueue_per_s": jobs / enqueue_s, "samples": samples}


def main() -> None:
    # The consumer imports this file as `huey_peer`: enqueue through that module too, so that
    # both name the task `huey_peer._noop` (run as a script, this copy is `__main__`).
    peer = importlib.import_module("huey_peer")
    try:
        report = peer._measure(int(sys.argv[1]))
    except Exception as exc:
        print(f"huey peer: {exc.__class__.__name__}: {exc}"[:300], file=sys.stderr)
        raise SystemExit(1) from None
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
