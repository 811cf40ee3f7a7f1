"""The real `run` daemon on the cluster profile with a 60 s cadence starts what is submitted
at once, also after its listener's backend was terminated.

With a cadence of 60 s (±10 %) and the start-up tick behind it, a dispatch that starts at
all within the 10 s each wait allows was started by a wake-up, not by the cadence.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from qinglong_dispatcher import clock
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.daemon import (
    free_port,
    get,
    log_events,
    metric_values,
    ready,
    running,
    wait_until,
)

pytestmark = pytest.mark.postgres

LISTENER = "qinglong-dispatcher-wakeup"  # the listener's application_name
UP = "qinglong_dispatcher_wakeup_listener_up"
RECONNECTS = "qinglong_dispatcher_wakeup_listener_reconnects_total"
WAIT_S = 10


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


def _env(url: str, port: int) -> dict[str, str]:
    return {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_CADENCE_SECONDS": "60",
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port),
        "QINGLONG_OWNER_ID": "replica-w",
    }


def _metrics(port: int) -> dict[str, float]:
    code, body = get(port, "/metrics")
    assert code == 200
    return metric_values(body)


def _submit_and_see_it_succeed(database: str) -> None:
    """Submit one run.create through the API (approver login); wait for it to succeed."""
    (consumed,) = anyio.run(submit_runs_as_approver, database, clock.SystemClock(), 1)

    def succeeded() -> bool:
        rows = anyio.run(
            stores.raw,
            database,
            "SELECT status FROM qinglong.approved_action_dispatch_executions "
            f"WHERE dispatch_id = '{consumed.dispatch_id}'",
        )
        return bool(rows[0]["status"] == "succeeded")

    wait_until(succeeded, timeout=WAIT_S, interval=0.1)


def _scenario(database: str, cwd: Path) -> str:
    runtime = stores.runtime_url(database)
    port = free_port()
    with running(cwd, _env(runtime, port), name="wakeup") as daemon:
        wait_until(functools.partial(ready, port))  # the start-up tick ran
        wait_until(lambda: _metrics(port)[UP] == 1)
        time.sleep(0.5)  # and the tick the subscription asks for
        _submit_and_see_it_succeed(database)

        terminated = anyio.run(
            stores.raw,
            "postgres",
            "SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity "
            f"WHERE datname = '{database}' AND application_name = '{LISTENER}'",
        )
        assert [r["done"] for r in terminated] == [True]
        wait_until(lambda: _metrics(port)[RECONNECTS] == 1 and _metrics(port)[UP] == 1)
        time.sleep(0.5)
        _submit_and_see_it_succeed(database)

        assert daemon.poll() is None, daemon.stderr[-2000:]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, daemon.stderr[-2000:]
        return daemon.stderr


async def test_submits_start_at_once_on_a_60_s_cadence_and_after_a_lost_listener(
    database: str, tmp_path: Path
) -> None:
    stderr = await anyio.to_thread.run_sync(_scenario, database, tmp_path)
    assert "Traceback" not in stderr
    events = [e["event"] for e in log_events(stderr)]
    assert events.count("wakeup.listening") == 2
    assert events.count("wakeup.lost") == 1
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(log_events(stderr)) == len(lines)  # structlog JSON only, nothing raw
