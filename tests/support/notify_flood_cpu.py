"""A one-off measurement, not a test: the CPU a cluster daemon spends under a `NOTIFY` flood.

    .venv/bin/python -m tests.support.notify_flood_cpu [--seconds 10] [--clients 4] [--unclaimable]

Starts the real `run` daemon (cluster profile, 1 s cadence) on a fresh database, measures its
CPU (user + system, from /proc) over an idle interval, then over the same interval while
`pgbench` sends `NOTIFY qinglong_dispatch_due` as fast as it can from a login that holds no
role at all, and prints the notifications delivered, the ticks and the CPU seconds of each.
With `--unclaimable` the database first holds a row that is due but cannot be claimed (a
`leased` row whose `eligible_at_ms` is in the past under a live lease), planted by the
administrator with the triggers stepped aside, so the daemon's side is measured whatever the
triggers admit. Timing depends on the machine: it stays out of the timed suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg

from qinglong_dispatcher.clock import SystemClock
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.daemon import free_port, get, metric_values, ready, running, wait_until

TICKS = "qinglong_dispatcher_ticks_total"
WAKEUPS = "qinglong_dispatcher_wakeups_total"
UP = "qinglong_dispatcher_wakeup_listener_up"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _metrics(port: int) -> dict[str, float]:
    return metric_values(get(port, "/metrics")[1])


async def plant_unclaimable(database: str) -> None:
    """A row due since long ago under a live lease (an hour): every tick observes it and none
    may claim it. The database refuses that shape (its lease expiry is when it is due), so the
    administrator writes it with the triggers stepped aside: the daemon's bound must hold
    whatever a database lets through (a clock skew makes the same observation)."""
    (consumed,) = await submit_runs_as_approver(database, SystemClock(), 1)
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(
                "UPDATE qinglong.approved_action_dispatch_executions SET status = 'leased', "
                "version = version + 1, attempt = attempt + 1, lease_owner = 'ghost', "
                "lease_token = 'ghost', eligible_at_ms = 1, "
                "lease_expires_at_ms = $2 WHERE dispatch_id = $1",
                consumed.dispatch_id,
                int(time.time() * 1000) + 3_600_000,
            )
    finally:
        await conn.close()


def _interval(pid: int, port: int, seconds: float, flood: list[str] | None) -> dict[str, float]:
    before, cpu = _metrics(port), _cpu_s(pid)
    sent = 0
    if flood is None:
        time.sleep(seconds)
    else:
        done = subprocess.run(flood, check=True, capture_output=True, text=True)
        sent = int(re.findall(r"actually processed: (\d+)", done.stdout)[0])
    after, spent = _metrics(port), _cpu_s(pid) - cpu
    return {
        "cpu_s": round(spent, 2),
        "notify_sent": sent,
        "ticks": after[TICKS] - before[TICKS],
        "wakeups": after[WAKEUPS] - before[WAKEUPS],
    }


def _measure(
    pid: int, port: int, seconds: float, flood: list[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Once the daemon listens: an idle interval, then a flooded one."""
    wait_until(lambda: ready(port))
    wait_until(lambda: _metrics(port)[UP] == 1)
    time.sleep(2)  # the start-up tick and the one the subscription asks for
    return _interval(pid, port, seconds, None), _interval(pid, port, seconds, flood)


async def main(seconds: float, clients: int, unclaimable: bool) -> None:
    """Measure idle, then flooded; print both."""
    async with stores.fresh_database() as database:
        if unclaimable:
            await plant_unclaimable(database)
        login = stores.session_login("flood")
        admin = await asyncpg.connect(stores.admin_dsn(), timeout=5)
        try:
            await admin.execute(f"CREATE ROLE {login} LOGIN")
        finally:
            await admin.close()
        try:
            with tempfile.TemporaryDirectory() as folder:
                script = Path(folder) / "notify.sql"
                script.write_text("NOTIFY qinglong_dispatch_due;\n")
                port = free_port()
                env = {
                    "QINGLONG_PROFILE": "cluster",
                    "QINGLONG_DATABASE_URL": stores.runtime_url(database),
                    "QINGLONG_CADENCE_SECONDS": "1",
                    "QINGLONG_METRICS_HOST": "127.0.0.1",
                    "QINGLONG_METRICS_PORT": str(port),
                    "QINGLONG_OWNER_ID": "replica-flood",
                }
                url = stores.pg_url(database, login=login)
                flood = ["pgbench", "-n", "-c", str(clients), "-j", str(min(clients, 2))]
                flood += ["-T", str(int(seconds)), "-f", str(script), url]
                with running(Path(folder), env, name="flood") as daemon:
                    idle, flooded = await asyncio.to_thread(
                        _measure, daemon.pid, port, seconds, flood
                    )
                    assert daemon.poll() is None, daemon.stderr[-2000:]
        finally:
            await stores.drop_roles(login)
    print(f"{seconds:g} s idle:    {idle}")
    print(f"{seconds:g} s flooded: {flooded}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--unclaimable", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.clients, args.unclaimable))
