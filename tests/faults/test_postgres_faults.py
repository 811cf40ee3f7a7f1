"""PostgreSQL under real faults: backends terminated mid-batch, and SIGKILL of a replica.

Connection loss: the dispatcher's own backends are ended with `pg_terminate_backend` by the
superuser while a real dispatcher drains, several times. The test drives the dispatcher like
the daemon does (a typed `StoreError` from a batch is logged and the next tick tries again).
An unacknowledged `start` must be replayed under its fence and a rolled-back `run.create`
effect retried by the same execute (docs/actions.md), so no dispatch is left for an operator.

SIGKILL: two `tick --drain` processes share 300 dispatches with a 1 s real lease; one is killed
at a seeded moment; after a restart, the lease and a reconcile pass, nothing ran twice and
nothing is lost. As strict as the SQLite test: each replica runs one execute at a time
(`QINGLONG_CONCURRENCY=1`), so at most one dispatch is left `recovery_required` — the
victim's, without a Run, observed `missing` — and everything else succeeded exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import asyncpg
import pytest
import structlog

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.adapters.postgres import database as pg_database
from qinglong_dispatcher.domain import errors
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.cli import SCRIPT, run_cli
from tests.support.clock import START_MS
from tests.support.dispatching import LEASE_MS, make_dispatcher

pytestmark = pytest.mark.postgres

TERMINATE_SQL = (
    "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
    "WHERE datname = $1 AND usename = $2 AND application_name = $3 "
    "AND pid <> pg_backend_pid()"
)


class MovingClock:
    """Real time (so that retry loops and deadlines progress) plus an offset the test moves."""

    def __init__(self) -> None:
        self._base_ms = START_MS - int(time.monotonic() * 1000)

    def now_ms(self) -> int:
        """Monotonic milliseconds from START_MS."""
        return self._base_ms + int(time.monotonic() * 1000)

    def advance(self, *, ms: int) -> None:
        """Jump forward."""
        self._base_ms += ms


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


async def invariants(database: str, *, now_ms: int | None = None) -> dict[str, int]:
    """Assert what no fault may break; return counts per status (effective)."""
    q = "qinglong."
    (most,) = await stores.raw(
        database,
        f"SELECT coalesce(max(n), 0) AS n FROM (SELECT count(*) AS n FROM {q}runs "
        "GROUP BY project_id, idempotency_key) AS per_dispatch",
    )
    assert most["n"] <= 1, "a dispatch has two Runs"
    (orphans,) = await stores.raw(
        database,
        f"SELECT count(*) AS n FROM {q}runs AS r LEFT JOIN {q}approved_run_action_receipts AS c "
        "ON c.resource_id = r.run_id WHERE c.dispatch_id IS NULL",
    )
    assert orphans["n"] == 0, "a Run without its receipt"
    starts = await stores.raw(
        database,
        f"SELECT dispatch_id, count(*) AS n FROM {q}execution_events "
        "WHERE to_status = 'executing' GROUP BY dispatch_id HAVING count(*) > 1",
    )
    assert starts == [], f"started twice: {starts[:5]}"
    (bad_starts,) = await stores.raw(
        database,
        f"SELECT count(*) AS n FROM {q}execution_events "
        "WHERE to_status = 'executing' AND from_status <> 'leased'",
    )
    assert bad_starts["n"] == 0
    rows = await stores.raw(
        database,
        "SELECT e.dispatch_id, e.status, e.lease_expires_at_ms, o.outcome, "
        f"EXISTS (SELECT 1 FROM {q}runs AS r WHERE r.idempotency_key = e.dispatch_id) AS has_run "
        f"FROM {q}approved_action_dispatch_executions AS e "
        f"LEFT JOIN {q}recovery_observations AS o ON o.dispatch_id = e.dispatch_id",
    )
    counts: Counter[str] = Counter()
    for row in rows:
        status = row["status"]
        if status == "succeeded":
            assert row["has_run"], row["dispatch_id"]
        elif status == "executing" and now_ms is not None and row["lease_expires_at_ms"] <= now_ms:
            # recovery_required: it must say why (an observation), and it has no Run.
            assert row["outcome"] is not None, row["dispatch_id"]
            assert not row["has_run"], row["dispatch_id"]
            status = "recovery_required"
        counts[status] += 1
    return dict(counts)


# -- connection loss ------------------------------------------------------------------------

DISPATCHES = 300
KILLS = 25


async def _killer(database: str, rng: random.Random, done: anyio.Event, hits: list[int]) -> None:
    """Terminate the dispatcher's backends `KILLS` times at seeded random moments."""
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        for _ in range(KILLS):
            await anyio.sleep(rng.uniform(0.03, 0.2))
            hits.append(
                await conn.fetchval(
                    TERMINATE_SQL,
                    database,
                    stores.RUNTIME_LOGIN,
                    pg_database.APPLICATION_NAME,
                )
            )
    finally:
        await conn.close()
        done.set()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
async def test_terminated_backends_mid_batch_leave_nothing_for_an_operator(
    database: str, seed: int
) -> None:
    rng = random.Random(seed)
    moving = MovingClock()
    store = await stores.open_postgres(
        stores.runtime_url(database), max_size=8, connect_timeout_s=5
    )
    try:
        await submit_runs_as_approver(database, moving, DISPATCHES)
        the_dispatcher = make_dispatcher(
            store, moving, owner="replica-a", page_size=64, concurrency=8
        )
        batch_errors: Counter[str] = Counter()
        outcomes: Counter[str] = Counter()

        async def tick_until_idle(deadline: float) -> None:
            """What the daemon's loop does: a failed tick is logged, the next one tries again."""
            idle = 0
            while idle < 2 or not killed.is_set():
                assert time.monotonic() < deadline, "the dispatcher did not drain in time"
                try:
                    report = await the_dispatcher.dispatch_batch()
                except errors.StoreError as exc:
                    batch_errors[exc.code] += 1
                    await anyio.sleep(0.02)
                    continue
                outcomes.update(report.outcomes)
                idle = idle + 1 if report.observed == 0 else 0
                if report.observed == 0:
                    await anyio.sleep(0.02)

        killed = anyio.Event()
        hits: list[int] = []
        with structlog.testing.capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_killer, database, rng, killed, hits)
                await tick_until_idle(time.monotonic() + 20)
            # Claims whose commit was not acknowledged hold a lease nobody knows the token of:
            # they are pre-barrier, so once the lease is over another tick takes them over.
            moving.advance(ms=LEASE_MS + 1)
            killed.set()
            await tick_until_idle(time.monotonic() + 10)
            reconciled = await bootstrap.build_reconciler(store, moving).reconcile_pass()
    finally:
        await store.close()

    events = Counter(str(e["event"]) for e in logs)
    print(
        f"seed={seed} terminated={hits} batch_errors={dict(batch_errors)} "
        f"outcomes={dict(outcomes)} reconcile={reconciled.outcomes} "
        f"start_replays={events['dispatch.start_unacknowledged']} "
        f"effect_retries={events['run_create.effect_retry']} "
        f"indeterminate={events['dispatch.indeterminate']} "
        f"completion_write_failed={events['dispatch.completion_write_failed']}"
    )
    for event in logs:  # what a failure needs to be understood
        if event["event"] in ("dispatch.start_refused", "dispatch.indeterminate"):
            print(event)
    assert sum(hits) > 0, "no backend was terminated: the fault never happened"
    counts = await invariants(database, now_ms=moving.now_ms())
    assert counts == {"succeeded": DISPATCHES}, counts
    per_dispatch = await stores.raw(
        database,
        "SELECT dispatch_id, count(*) AS n FROM qinglong.execution_events "
        "WHERE (from_status, to_status) IN (('leased', 'executing'), ('pending', 'succeeded')) "
        "GROUP BY dispatch_id",
    )
    assert len(per_dispatch) == DISPATCHES
    assert {r["n"] for r in per_dispatch} == {1}
    (runs,) = await stores.raw(database, "SELECT count(*) AS n FROM qinglong.runs")
    assert runs["n"] == DISPATCHES


# -- SIGKILL of one of two replicas ---------------------------------------------------------


def _env(url: str, owner: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    return {
        **clean,
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_LEASE_SECONDS": "1",
        "QINGLONG_OWNER_ID": owner,
        # `run.create` takes the page transaction (start, effect and completion in one
        # commit), so a kill leaves none of it half done; only an item sent down the per-item
        # path can be cut off between its start barrier and its completion, and one execute
        # at a time bounds those to one, the edge bound. The cluster default (8) would allow
        # eight and hide a regression that leaves one per item of the page.
        "QINGLONG_CONCURRENCY": "1",
    }


def _drain(url: str, owner: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(SCRIPT), "tick", "--drain"],
        cwd=cwd,
        env=_env(url, owner),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _succeeded(admin_url: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(admin_url, timeout=5)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM qinglong.approved_action_dispatch_executions "
                    "WHERE status = 'succeeded'"
                )
            )
        finally:
            await conn.close()

    return anyio.run(count)


def _kill_one_of_two(database: str, cwd: Path, rng: random.Random) -> dict[str, Any]:
    url, admin = stores.runtime_url(database), stores.pg_url(database)
    victim, survivor = _drain(url, "replica-a", cwd), _drain(url, "replica-b", cwd)
    try:
        threshold = rng.randint(10, 120)
        deadline = time.monotonic() + 30
        while _succeeded(admin) < threshold and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        assert victim.poll() is None, "the drain finished before the kill"
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        assert survivor.wait(timeout=60) == 0
    finally:
        for process in (victim, survivor):
            if process.poll() is None:
                process.kill()
                process.wait()
    restarted = run_cli("tick", "--drain", cwd=cwd, env=_env(url, "replica-c"))
    assert restarted.returncode == 0, restarted.stderr
    time.sleep(1.1)  # wait out the dead process's leases
    for args in (("tick", "--drain"), ("tick", "--once")):  # takeover, then a reconcile pass
        again = run_cli(*args, cwd=cwd, env=_env(url, "replica-c"))
        assert again.returncode == 0, again.stderr
    return {"threshold": threshold}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sigkill_of_one_of_two_replicas_loses_nothing_and_runs_nothing_twice(
    database: str, tmp_path: Path, seed: int
) -> None:
    # The subprocesses run on the system clock, so the rows are due by it.
    await submit_runs_as_approver(database, clock.SystemClock(), DISPATCHES)
    info = await anyio.to_thread.run_sync(_kill_one_of_two, database, tmp_path, random.Random(seed))
    now_ms = int(time.time() * 1000)
    counts = await invariants(database, now_ms=now_ms)
    print(f"seed={seed} killed after {info['threshold']} succeeded: {counts}")
    # Succeeded, or recovery_required; nothing failed, blocked or still waiting.
    assert set(counts) <= {"succeeded", "recovery_required"}, counts
    assert counts.get("succeeded", 0) + counts.get("recovery_required", 0) == DISPATCHES
    # The victim ran one execute at a time: at most one was cut off after its barrier.
    assert counts.get("recovery_required", 0) <= 1, counts
    open_rows = await stores.raw(
        database,
        "SELECT e.dispatch_id, e.lease_owner, o.outcome "
        "FROM qinglong.approved_action_dispatch_executions AS e "
        "LEFT JOIN qinglong.recovery_observations AS o ON o.dispatch_id = e.dispatch_id "
        "WHERE e.status <> 'succeeded'",
    )
    for row in open_rows:  # the victim's, and the evidence provider found no receipt
        assert (row["lease_owner"], row["outcome"]) == ("replica-a", "missing"), dict(row)
    per_dispatch = await stores.raw(
        database,
        "SELECT count(*) AS n FROM qinglong.execution_events "
        "WHERE to_status = 'executing' OR from_status = 'pending' AND to_status = 'succeeded' "
        "GROUP BY dispatch_id",
    )
    assert len(per_dispatch) == DISPATCHES
    # Every dispatch started exactly once: a start barrier, or a passage.
    assert {r["n"] for r in per_dispatch} == {1}
    (runs,) = await stores.raw(database, "SELECT count(*) AS n FROM qinglong.runs")
    assert runs["n"] == counts["succeeded"]
