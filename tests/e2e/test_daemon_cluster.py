"""Two real `run` daemons on the cluster profile share one PostgreSQL database, and
`run` refuses an unreachable or unmigrated store in one line with its exit code."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib import parse

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, log_events, ready, running, wait_until

pytestmark = pytest.mark.postgres

DISPATCHES = 500
OWNERS = ("replica-a", "replica-b")


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


def _env(url: str, *, owner: str = "replica-x", port: int | None = None) -> dict[str, str]:
    return {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port if port is not None else free_port()),
        "QINGLONG_OWNER_ID": owner,
    }


def _share(url: str, approver: str, cwd: Path) -> tuple[float, list[str]]:
    """Start two daemons (runtime login), submit (approver login), wait for every dispatch to
    succeed, SIGTERM both."""
    ports = {owner: free_port() for owner in OWNERS}
    with (
        running(cwd, _env(url, owner="replica-a", port=ports["replica-a"]), name="a") as a,
        running(cwd, _env(url, owner="replica-b", port=ports["replica-b"]), name="b") as b,
    ):
        for port in ports.values():
            wait_until(functools.partial(ready, port))
        lines = [
            f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}' for i in range(DISPATCHES)
        ]
        (cwd / "plans.jsonl").write_text("\n".join(lines))
        started = time.monotonic()
        submitted = run_cli(
            "submit", "run-create", "--from-jsonl", "plans.jsonl", cwd=cwd, env=_env(approver)
        )
        assert submitted.returncode == 0, submitted.stderr

        def all_succeeded() -> bool:
            status = json_out(run_cli("status", "--json", cwd=cwd, env=_env(url)))
            return bool(status["executions"]["succeeded"] == DISPATCHES)

        wait_until(all_succeeded, timeout=25, interval=0.2)
        elapsed = time.monotonic() - started
        for daemon in (a, b):
            assert daemon.poll() is None, daemon.stderr[-2000:]
            daemon.send_signal(signal.SIGTERM)
        codes = [daemon.wait(timeout=30) for daemon in (a, b)]
        logs = [daemon.stderr for daemon in (a, b)]
    assert codes == [0, 0], logs
    for stderr in logs:
        assert "Traceback" not in stderr
        assert "daemon.stopped" in [e["event"] for e in log_events(stderr)]
    return elapsed, logs


@pytest.mark.slow
async def test_two_daemons_share_500_dispatches_and_start_each_once(
    database: str, tmp_path: Path
) -> None:
    elapsed, _ = await anyio.to_thread.run_sync(
        _share, stores.runtime_url(database), stores.approver_url(database), tmp_path
    )
    # A start is the barrier's line, or a passage's (claim, start and completion at once).
    starts = await stores.raw(
        database,
        "SELECT dispatch_id, count(*) AS n FROM qinglong.execution_events "
        "WHERE (from_status, to_status) IN (('leased', 'executing'), ('pending', 'succeeded')) "
        "GROUP BY dispatch_id",
    )
    assert len(starts) == DISPATCHES
    assert {r["n"] for r in starts} == {1}
    (runs,) = await stores.raw(database, "SELECT count(*) AS n FROM qinglong.runs")
    assert runs["n"] == DISPATCHES
    per_owner = await stores.raw(
        database,
        "SELECT lease_owner, "
        "count(*) FILTER (WHERE to_status = 'leased' OR to_status = 'succeeded' "
        "AND from_status = 'pending') AS claimed, "
        "count(*) FILTER (WHERE to_status = 'executing' OR to_status = 'succeeded' "
        "AND from_status = 'pending') AS started "
        "FROM qinglong.execution_events WHERE lease_owner IS NOT NULL "
        "GROUP BY lease_owner ORDER BY lease_owner",
    )
    assert {r["lease_owner"] for r in per_owner} <= set(OWNERS)
    assert sum(r["started"] for r in per_owner) == DISPATCHES
    split = ", ".join(f"{r['lease_owner']}: {r['claimed']} claimed" for r in per_owner)
    print(f"{DISPATCHES} dispatches in {elapsed:.1f}s; {split}")  # reported, not asserted


def _refused(url: str, cwd: Path) -> tuple[int, str]:
    with running(cwd, _env(url)) as daemon:
        code = daemon.wait(timeout=30)
        return code, daemon.stderr


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


async def test_an_unreachable_postgresql_is_exit_69_in_one_line(tmp_path: Path) -> None:
    parts = parse.urlsplit(stores.runtime_url("qinglong"))
    url = parse.urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:1"))
    code, stderr = await anyio.to_thread.run_sync(_refused, url, tmp_path)
    assert code == 69, stderr
    line = _one_line(stderr)
    assert stores.LOGIN_PASSWORD not in line  # never the password


async def test_an_unmigrated_database_is_exit_1_in_one_line(tmp_path: Path) -> None:
    async with stores.fresh_database(migrated=False) as database:
        code, stderr = await anyio.to_thread.run_sync(
            _refused, stores.runtime_url(database), tmp_path
        )
    assert code == 1, stderr
    assert "migrat" in _one_line(stderr)


async def test_a_store_outage_keeps_the_logs_json_and_names_the_error(
    database: str, tmp_path: Path
) -> None:
    """While the database refuses connections the daemon logs only structlog JSON lines (no
    raw driver tracebacks), and each `daemon.tick_failed` names the error's class and message.
    """
    url = stores.runtime_url(database)
    with running(tmp_path, _env(url), name="outage") as daemon:
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: "daemon.ready" in daemon.stderr))
        await stores.raw("postgres", f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            await stores.raw(
                "postgres",
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{database}' AND application_name = 'qinglong-dispatcher'",
            )
            await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: daemon.stderr.count("daemon.tick_failed") >= 3)
            )
        finally:
            await stores.raw("postgres", f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, daemon.stderr[-2000:]
        stderr = daemon.stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    events = log_events(stderr)
    assert len(events) == len(lines), [line for line in lines if not line.startswith("{")]
    failed = [e for e in events if e["event"] == "daemon.tick_failed"]
    assert failed
    for event in failed:
        assert event["error"] in ("StoreUnavailable", "StoreBusy", "StoreError"), event
        assert event["message"], event
        assert stores.LOGIN_PASSWORD not in event["message"]  # never the password
