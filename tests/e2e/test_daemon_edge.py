"""The `run` daemon on the edge profile as a real subprocess: dispatch, metrics, health,
systemd notifications, graceful and immediate stops, and bad configuration."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from qinglong_dispatcher.lifecycle import metrics
from tests.support.cli import json_out, run_cli
from tests.support.daemon import (
    free_port,
    get,
    log_events,
    metric_values,
    ready,
    running,
    wait_until,
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    return tmp_path


@pytest.mark.slow
def test_the_daemon_dispatches_serves_metrics_notifies_and_stops_cleanly(workdir: Path) -> None:
    port = free_port()
    notify_path = workdir / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(notify_path))
    receiver.settimeout(0.5)
    received: list[str] = []
    listening = threading.Event()
    listening.set()

    def drain() -> None:  # a datagram queue holds few messages: read as systemd would
        while listening.is_set():
            with contextlib.suppress(TimeoutError):
                received.append(receiver.recv(4096).decode())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_METRICS_PORT": str(port),
        "NOTIFY_SOCKET": str(notify_path),
        "WATCHDOG_USEC": "2000000",
    }
    lines = "\n".join(f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}' for i in range(100))
    (workdir / "plans.jsonl").write_text(lines)
    with running(workdir, env) as daemon:
        wait_until(lambda: ready(port))
        assert (
            run_cli("submit", "run-create", "--from-jsonl", "plans.jsonl", cwd=workdir).returncode
            == 0
        )

        def all_done() -> bool:
            status = json_out(run_cli("status", "--json", cwd=workdir))
            return bool(status["executions"]["succeeded"] == 100)

        wait_until(all_done)
        time.sleep(0.2)  # a tick after the last completion refreshes the gauges
        code, body = get(port, "/metrics")
        assert code == 200
        for name in metrics.SERIES_NAMES:
            assert name in body, name
        values = metric_values(body)
        assert values['qinglong_dispatcher_claims_total{result="claimed"}'] == 100
        assert (
            values[
                'qinglong_dispatcher_outcomes_total{action_type="run.create",outcome="succeeded"}'
            ]
            == 100
        )
        assert values["qinglong_dispatcher_due"] == 0
        # Nothing due: `status` and the gauge say the same, 0.
        status = json_out(run_cli("status", "--json", cwd=workdir))
        assert (status["due"], status["oldest_due_age_seconds"]) == (0, 0)
        assert values["qinglong_dispatcher_oldest_due_age_seconds"] == 0
        assert values["qinglong_dispatcher_recovery_required"] == 0
        assert values["qinglong_dispatcher_ticks_total"] >= 1
        assert values["qinglong_dispatcher_last_successful_tick_timestamp_seconds"] > 0
        assert values['qinglong_dispatcher_build_info{profile="edge",version="0.1.0"}'] == 1
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz")[0] == 200
        started = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=25) == 0
        assert time.monotonic() - started < 20
        stderr = daemon.stderr
    assert "Traceback" not in stderr
    events = log_events(stderr)
    names = [event["event"] for event in events]
    assert "daemon.ready" in names
    # run.create pages commit together: one event per page carries every dispatch's outcome.
    committed = [
        dispatch_id
        for event in events
        if event["event"] == "dispatch.page_committed"
        for dispatch_id in event["dispatch_ids"]
    ]
    assert len(committed) == len(set(committed)) == 100
    assert "daemon.stopped" in names
    time.sleep(0.6)
    listening.clear()
    reader.join(timeout=5)
    receiver.close()
    assert any("READY=1" in message for message in received)
    assert any("WATCHDOG=1" in message for message in received)
    assert any("STOPPING=1" in message for message in received)
    assert any("EXTEND_TIMEOUT_USEC=" in message for message in received)


def test_a_second_signal_exits_at_once_with_status_1(workdir: Path) -> None:
    port = free_port()
    env = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_METRICS_PORT": str(port)}
    with running(workdir, env) as daemon:
        wait_until(lambda: ready(port))
        # Another writer holds the file: the tick waits on the busy timeout, so the drain
        # cannot finish quickly and the second signal has something to cut short.
        blocker = sqlite3.connect(workdir / "var" / "qinglong.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            time.sleep(0.3)
            daemon.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            daemon.send_signal(signal.SIGTERM)
            started = time.monotonic()
            assert daemon.wait(timeout=10) == 1
            assert time.monotonic() - started < 2
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        stderr = daemon.stderr
    assert "Traceback" not in stderr
    assert "daemon.killed" in stderr


@pytest.mark.parametrize(
    ("env", "code", "names"),
    [
        ({"QINGLONG_PAGE_SIZE": "65"}, 78, "QINGLONG_PAGE_SIZE"),
        ({"QINGLONG_PROFILE": "mainframe"}, 78, "QINGLONG_PROFILE"),
        ({"QINGLONG_EXECUTE_TIMEOUT_SECONDS": "40"}, 78, "QINGLONG_EXECUTE_TIMEOUT_SECONDS"),
        ({"QINGLONG_DATABASE_URL": "sqlite:////proc/qinglong/q.db"}, 69, "SQLite"),
        ({"QINGLONG_DATABASE_URL": "sqlite:///missing.db"}, 69, "run migrate first"),
        ({"QINGLONG_DATABASE_URL": "sqlite:///unmigrated.db"}, 1, "migrat"),
    ],
)
def test_bad_configuration_is_one_line_and_the_right_exit_code(
    workdir: Path, env: dict[str, str], code: int, names: str
) -> None:
    # An existing but empty file: unmigrated (a missing one is refused before any schema check).
    sqlite3.connect(workdir / "unmigrated.db").close()
    with running(workdir, {"QINGLONG_METRICS_PORT": str(free_port()), **env}) as daemon:
        assert daemon.wait(timeout=20) == code
        stderr = daemon.stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert names in lines[0]
    assert "Traceback" not in stderr


def test_a_taken_metrics_port_is_a_configuration_error(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with running(workdir, {"QINGLONG_METRICS_PORT": str(port)}) as daemon:
            assert daemon.wait(timeout=20) == 78
            stderr = daemon.stderr
    assert "QINGLONG_METRICS_PORT" in stderr


def test_a_second_daemon_on_the_same_file_refuses_to_start(workdir: Path) -> None:
    """The SQLite file has one authority: a second `run` exits 1 in one line, and once the
    first is gone (even killed) the next one starts."""
    first_port = free_port()
    env = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_METRICS_PORT": str(first_port)}
    with running(workdir, env, name="first") as first:
        wait_until(lambda: ready(first_port))
        second = run_cli(
            "run", cwd=workdir, env={**env, "QINGLONG_METRICS_PORT": str(free_port())}, timeout=30
        )
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "another daemon already runs on" in lines[0]
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first one is untouched
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    third_port = free_port()
    with running(workdir, {**env, "QINGLONG_METRICS_PORT": str(third_port)}, name="third") as third:
        wait_until(lambda: ready(third_port))
        third.send_signal(signal.SIGTERM)
        assert third.wait(timeout=25) == 0, third.stderr


@pytest.mark.slow
@pytest.mark.parametrize("link", ["symlinked folder", "symlinked file", "hard link"])
def test_a_second_daemon_reaching_the_same_file_through_a_link_refuses_to_start(
    workdir: Path, link: str
) -> None:
    """The lock belongs to the file, not its path: a symlinked folder (systemd `DynamicUser`'s
    `/var/lib/<name>`), a symlink to the file or a hard link to it is the same authority."""
    database = workdir / "var" / "qinglong.db"
    if link == "symlinked folder":
        (workdir / "linked").symlink_to(workdir / "var", target_is_directory=True)
        other = workdir / "linked" / "qinglong.db"
    elif link == "symlinked file":
        other = workdir / "other.db"
        other.symlink_to(database)
    else:
        other = workdir / "other.db"
        other.hardlink_to(database)
    assert other.stat().st_ino == database.stat().st_ino
    first_port = free_port()
    env = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_METRICS_PORT": str(first_port)}
    with running(workdir, env, name="first") as first:
        wait_until(lambda: ready(first_port))
        second = run_cli(
            "run",
            cwd=workdir,
            env={
                **env,
                "QINGLONG_METRICS_PORT": str(free_port()),
                "QINGLONG_DATABASE_URL": f"sqlite:///{other}",
            },
            timeout=30,
        )
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "another daemon already runs on" in lines[0]
        assert first.poll() is None
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=25) == 0, first.stderr
