"""`QINGLONG_REQUIRE_SYNC_STANDBY=true`: `run` refuses to start (exit 78,
one line) unless the primary has a synchronous standby and `synchronous_commit` is `on` or
`remote_apply`, and readiness fails while that stops holding."""

from __future__ import annotations

import functools
import json
import signal
from pathlib import Path

import anyio.to_thread
import pytest

from tests.support import pg_ha, stores
from tests.support.daemon import free_port, get, log_events, ready, running, wait_until

pytestmark = pytest.mark.postgres

SETTING = "QINGLONG_REQUIRE_SYNC_STANDBY"


def _env(url: str, port: int = 0) -> dict[str, str]:
    return {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_REQUIRE_SYNC_STANDBY": "true",
        "QINGLONG_CADENCE_SECONDS": "0.1",
        "QINGLONG_RECONCILE_SECONDS": "0.2",
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port or free_port()),
    }


def _refused(url: str, cwd: Path) -> str:
    """`run` must exit 78 with one line on stderr; that line."""
    with running(cwd, _env(url), name="refused") as daemon:
        code = daemon.wait(timeout=30)
        stderr = daemon.stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 78, stderr
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


async def test_a_single_server_is_refused_in_one_line(tmp_path: Path) -> None:
    async with stores.fresh_database() as database:
        # The superuser sees pg_stat_replication: there is no standby at all.
        line = await anyio.to_thread.run_sync(_refused, stores.pg_url(database), tmp_path)
        assert SETTING in line
        assert "no synchronous standby" in line
        # A plain runtime login cannot see sync_state: refused, naming the grant it needs.
        line = await anyio.to_thread.run_sync(_refused, stores.runtime_url(database), tmp_path)
        assert SETTING in line
        assert "pg_read_all_stats" in line
        assert stores.LOGIN_PASSWORD not in line  # never the password


def _readiness(port: int) -> tuple[bool, str]:
    status, body = get(port, "/readyz")
    return status == 200, json.loads(body)["reason"]


@pytest.mark.slow
async def test_run_starts_with_a_synchronous_standby_and_readiness_follows_it(
    tmp_path: Path,
) -> None:
    async with pg_ha.synchronous_pair() as cluster:
        login = pg_ha.RUNTIME_LOGIN
        await cluster.admin(cluster.primary, f"GRANT pg_read_all_stats TO {login}")
        url = cluster.url(login)
        port = free_port()
        with running(tmp_path, _env(url, port), name="guarded") as daemon:
            await anyio.to_thread.run_sync(
                lambda: wait_until(functools.partial(ready, port), timeout=60)
            )

            cluster.stop_standby()
            not_ready = await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: not _readiness(port)[0], timeout=30)
            )
            assert not_ready
            ok, reason = _readiness(port)
            assert not ok
            assert SETTING in reason
            assert "no synchronous standby" in reason
            assert daemon.poll() is None  # still running: only readiness fails

            # While it lasts a new replica refuses to start at all.
            line = await anyio.to_thread.run_sync(_refused, url, tmp_path)
            assert "no synchronous standby" in line

            await cluster.start_standby()
            await anyio.to_thread.run_sync(
                lambda: wait_until(functools.partial(ready, port), timeout=30)
            )
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=30) == 0, daemon.stderr[-2000:]
            names = [event["event"] for event in log_events(daemon.stderr)]
        assert names.count("daemon.durability_lost") == 1, names
        assert names.count("daemon.durability_restored") == 1, names

        # A URL naming only the standby: no writable host, so `run` cannot start (69).
        standby_only = cluster.single_url(cluster.standby, login)
        standby_only += "?target_session_attrs=read-write"
        with running(tmp_path, _env(standby_only), name="standby-only") as daemon:
            code = await anyio.to_thread.run_sync(lambda: daemon.wait(timeout=30))
            lines = daemon.stderr.strip().splitlines()
        assert code == 69, lines
        assert len(lines) == 1, lines

        # synchronous_commit must wait for the standby: remote_write does not.
        await cluster.admin(
            cluster.primary, f"ALTER ROLE {login} SET synchronous_commit = remote_write"
        )
        line = await anyio.to_thread.run_sync(_refused, url, tmp_path)
        assert "synchronous_commit is remote_write" in line
