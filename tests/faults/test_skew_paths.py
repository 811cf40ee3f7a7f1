"""The cluster skew guard through the real `tick` and `run` (docs/state-machine.md).

The skew is real, on the database side: the test database's `search_path` puts a schema first
whose `clock_timestamp()` runs an hour ahead, so the server's clock as the store reads it
(`database_now`, unqualified `clock_timestamp()`) disagrees with the replica's system clock
exactly as a server with a wrong clock would. No code of the daemon is changed or faked.
`tick` must refuse in one line without claiming; a `run` daemon must claim nothing while the
skew lasts, count each refusal in `qinglong_dispatcher_clock_skew_refusals_total`, and claim
everything once the clock is right again.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import asyncpg
import pytest

from qinglong_dispatcher import clock
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.cli import error_lines, run_cli
from tests.support.daemon import free_port, get, log_events, metric_values, running, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

DISPATCHES = 5
REFUSALS = "qinglong_dispatcher_clock_skew_refusals_total"


@pytest.fixture
async def skewed() -> AsyncIterator[str]:
    """A migrated database whose server clock, as sessions see it, is one hour ahead."""
    async with stores.fresh_database() as name:
        await submit_runs_as_approver(name, clock.SystemClock(), DISPATCHES)
        for sql in (
            "CREATE SCHEMA test_skew",
            "CREATE FUNCTION test_skew.clock_timestamp() RETURNS timestamptz LANGUAGE sql "
            "AS $$ SELECT pg_catalog.clock_timestamp() + interval '1 hour' $$",
            "GRANT USAGE ON SCHEMA test_skew TO PUBLIC",
            f'ALTER DATABASE {name} SET search_path = test_skew, pg_catalog, "$user", public',
        ):
            await stores.raw(name, sql)
        yield name


async def _server_ahead_s(database: str) -> float:
    conn = await asyncpg.connect(stores.runtime_url(database), timeout=5)
    try:
        return float(
            await conn.fetchval(
                "SELECT extract(epoch FROM clock_timestamp() - pg_catalog.clock_timestamp())"
            )
        )
    finally:
        await conn.close()


async def _statuses(database: str) -> dict[str, int]:
    rows = await stores.raw(
        database,
        "SELECT status, count(*) AS n FROM qinglong.approved_action_dispatch_executions "
        "GROUP BY status",
    )
    return {r["status"]: r["n"] for r in rows}


def _env(url: str, port: int) -> dict[str, str]:
    return {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port),
    }


def _refusals(port: int) -> float:
    try:
        status, body = get(port, "/metrics")
    except OSError:  # not listening yet
        return 0.0
    return metric_values(body).get(REFUSALS, 0.0) if status == 200 else 0.0


async def test_tick_refuses_to_claim_under_skew(skewed: str, tmp_path: Path) -> None:
    assert await _server_ahead_s(skewed) > 3500  # the fault bites the runtime login's sessions
    ticked = await anyio.to_thread.run_sync(
        functools.partial(
            run_cli,
            "tick",
            "--drain",
            cwd=tmp_path,
            env=_env(stores.runtime_url(skewed), free_port()),
        )
    )
    assert ticked.returncode == 1, ticked.stderr
    lines = error_lines(ticked.stderr)
    assert len(lines) == 1, ticked.stderr
    assert "clock skew" in lines[0]
    assert "QINGLONG_MAX_CLOCK_SKEW_SECONDS" in lines[0]
    assert await _statuses(skewed) == {"pending": DISPATCHES}


async def test_run_claims_nothing_under_skew_counts_it_and_resumes_when_it_ends(
    skewed: str, tmp_path: Path
) -> None:
    events_sql = "SELECT count(*) AS n FROM qinglong.execution_events"
    (before,) = await stores.raw(skewed, events_sql)
    port = free_port()
    with running(tmp_path, _env(stores.runtime_url(skewed), port)) as daemon:
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: _refusals(port) >= 5))
        assert daemon.poll() is None, daemon.stderr[-2000:]
        assert await _statuses(skewed) == {"pending": DISPATCHES}
        (after,) = await stores.raw(skewed, events_sql)
        assert after == before  # not one claim, not even one released again
        _, body = get(port, "/metrics")
        metrics = metric_values(body)
        assert metrics["qinglong_dispatcher_clock_skew_seconds"] < -3500
        # The server's clock is right again: the guard lets the same daemon claim.
        await stores.raw(skewed, "DROP FUNCTION test_skew.clock_timestamp()")

        for _ in range(300):
            if await _statuses(skewed) == {"succeeded": DISPATCHES}:
                break
            await anyio.sleep(0.1)
        else:
            raise AssertionError(f"not claimed after the skew ended: {await _statuses(skewed)}")
        refusals = _refusals(port)
    # One warning per refused tick, and the counter counted each of them.
    events = [e["event"] for e in log_events(daemon.stderr)]
    assert events.count("daemon.clock_skew") == refusals
