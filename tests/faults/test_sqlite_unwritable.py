"""A SQLite file that cannot be written: errors name the cause, and the daemon is not ready
while it lasts. Made real with `chattr +i` (immutable: it stops root too, whose permission
bits are never checked), on the file a running daemon holds open."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from qinglong_dispatcher.adapters.sqlite import database as sqlite_database
from tests.support.cli import error_lines, run_cli
from tests.support.daemon import free_port, get, ready, running, wait_until

SUBMIT = ("submit", "run-create", "--project", "p1", "--task", "t1", "--revision", "1")


def _unavailable(reason: str) -> NoReturn:
    # Debian's base system has chattr and CI runs as root on a local file system: there, a
    # missing or refused chattr is a broken machine, not a reason to skip.
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true this test may not skip")
    pytest.skip(reason)


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """`chattr +i path` for the block (skips where the file system or the user cannot)."""
    if shutil.which("chattr") is None:
        _unavailable("chattr is not installed")
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        _unavailable(f"chattr +i refused here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def _readiness(port: int) -> tuple[int, str]:
    status, body = get(port, "/readyz")
    return status, str(json.loads(body).get("reason", body)) if body.startswith("{") else body


def _unready_reason(port: int) -> str:
    """`/readyz`'s reason while it answers 503 ("" while ready)."""
    status, reason = _readiness(port)
    return reason if status == 503 else ""


def test_an_immutable_file_fails_readiness_and_commands_name_the_cause(tmp_path: Path) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    database = tmp_path / "var" / "qinglong.db"
    port = free_port()
    env = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_METRICS_PORT": str(port)}
    with running(tmp_path, env) as daemon:
        wait_until(lambda: ready(port))
        with _immutable(database):
            reason = wait_until(lambda: _unready_reason(port))
            assert "store not writable" in reason
            assert "SQLite file var/qinglong.db is not writable (write not permitted)" in reason
            refused = run_cli(*SUBMIT, cwd=tmp_path)
            assert refused.returncode == 69, refused.stderr
            (line,) = error_lines(refused.stderr)
            assert "attempt to write a readonly database (SQLITE_READONLY)" in line
            assert "is not writable (write not permitted)" in line
            assert "Traceback" not in refused.stderr
            assert daemon.poll() is None  # not ready, still running
        wait_until(lambda: ready(port))  # writable again: ready again
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=25) == 0, daemon.stderr
    events = [json.loads(x) for x in daemon.stderr.splitlines() if x.startswith("{")]
    names = [e["event"] for e in events]
    assert names.count("daemon.store_not_writable") == 1
    assert "daemon.store_writable" in names


def test_a_write_refused_under_a_read_only_open_names_sqlites_reason(tmp_path: Path) -> None:
    """The store's own translation of a refused write (the command opens its file `mode=rw`;
    this one is opened read-only through SQLite's URI, the seam for a read-only medium)."""
    path = tmp_path / "q.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.Error) as caught:
            conn.execute("INSERT INTO t VALUES (1)")
    finally:
        conn.close()
    error = sqlite_database.translate(caught.value)
    assert str(error) == (
        "SQLite file cannot be used: attempt to write a readonly database (SQLITE_READONLY)"
    )
    assert os.access(path, os.W_OK)  # the file itself was never the cause
