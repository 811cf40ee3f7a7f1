"""SQLite under real faults: a lock held past the busy timeout, a full disk, SIGKILL."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.cli import SCRIPT, run_cli
from tests.support.clock import START_MS, ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.sqlite_files import execution_statuses


@pytest.fixture
async def edge_store(tmp_path: Path) -> AsyncIterator[sqlite_store.SqliteStore]:
    store = await stores.open_sqlite(tmp_path / "q.db", busy_timeout_s=0.2)
    await store.migrate(now_ms=START_MS)
    yield store
    await store.close()


async def test_a_lock_held_past_the_busy_timeout_fails_closed_and_the_next_tick_works(
    edge_store: sqlite_store.SqliteStore, clock: ManualClock
) -> None:
    await submit_runs(edge_store, clock, 3)
    blocker = sqlite3.connect(edge_store.db.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    the_dispatcher = make_dispatcher(edge_store, clock)
    try:
        with pytest.raises(errors.StoreBusy):
            await the_dispatcher.dispatch_batch()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert execution_statuses(edge_store.db.path) == {"pending": 3}  # nothing half-written
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["succeeded"] == 3


async def test_a_full_disk_fails_closed_and_work_resumes_when_space_is_back(
    edge_store: sqlite_store.SqliteStore, clock: ManualClock
) -> None:
    await submit_runs(edge_store, clock, 40)

    def shrink(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    def grow(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA max_page_count = 1073741823")

    await edge_store.db.read(shrink)
    with pytest.raises(errors.StoreFull):
        await submit_runs(edge_store, clock, 200)
    the_dispatcher = make_dispatcher(edge_store, clock, page_size=40)
    with pytest.raises(errors.StoreFull):
        await the_dispatcher.dispatch_batch()
    assert execution_statuses(edge_store.db.path) == {"pending": 40}
    await edge_store.db.read(grow)
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["succeeded"] == 40


def _invariants(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        per_dispatch = conn.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM runs GROUP BY idempotency_key)"
        ).fetchone()[0]
        assert per_dispatch in (None, 1)
        orphans = conn.execute(
            "SELECT count(*) FROM runs r LEFT JOIN approved_run_action_receipts c "
            "ON c.resource_id = r.run_id WHERE c.dispatch_id IS NULL"
        ).fetchone()[0]
        assert orphans == 0
        starts = conn.execute(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM execution_events "
            "WHERE to_status = 'executing' OR from_status = 'pending' AND to_status = 'succeeded' "
            "GROUP BY dispatch_id)"
        ).fetchone()[0]
        assert starts == 1
        now_ms = int(time.time() * 1000)
        open_rows = conn.execute(
            "SELECT e.dispatch_id, e.status, e.lease_expires_at_ms, o.outcome "
            "FROM approved_action_dispatch_executions e "
            "LEFT JOIN recovery_observations o ON o.dispatch_id = e.dispatch_id "
            "WHERE e.status NOT IN ('succeeded', 'failed', 'blocked')"
        ).fetchall()
        for dispatch_id, status, expires, observation in open_rows:
            assert status == ExecutionStatus.EXECUTING.value, dispatch_id
            assert expires <= now_ms
            assert observation == "missing"
        succeeded = conn.execute(
            "SELECT count(*) FROM approved_action_dispatch_executions WHERE status = 'succeeded'"
        ).fetchone()[0]
        runs = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        assert succeeded == runs
        return {"succeeded": succeeded, "recovery_required": len(open_rows)}
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_drain_loses_nothing_and_runs_nothing_twice(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    # Pages of four, passages too: the drain lasts long enough for the kill to land in it.
    env = {
        "QINGLONG_LEASE_SECONDS": "1",
        "QINGLONG_PAGE_SIZE": "4",
        "QINGLONG_PASSAGE_PAGE_SIZE": "4",
    }
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    lines = [f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}' for i in range(300)]
    (tmp_path / "plans.jsonl").write_text("\n".join(lines))
    submitted = run_cli("submit", "run-create", "--from-jsonl", "plans.jsonl", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    db = tmp_path / "var" / "qinglong.db"

    victim = subprocess.Popen(
        [str(SCRIPT), "tick", "--drain"],
        cwd=tmp_path,
        env={**_clean_env(), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    threshold = rng.randint(5, 60)
    deadline = time.monotonic() + 30
    while execution_statuses(db).get("succeeded", 0) < threshold and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))
    assert victim.poll() is None, "the drain finished before the kill"
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL

    assert run_cli("tick", "--drain", cwd=tmp_path, env=env).returncode == 0
    time.sleep(1.1)  # wait out the dead process's leases
    assert run_cli("tick", "--drain", cwd=tmp_path, env=env).returncode == 0
    result = _invariants(db)
    assert result["succeeded"] + result["recovery_required"] == 300
    assert result["recovery_required"] <= 1  # edge runs one execute at a time


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
