"""SIGKILL inside the passage: nothing of the page committed, every item passed once after.

A real child process (`tests.support.page_kill`) passes a page of 16 `run.create` dispatches
(claim, start, effect, receipt and completion in one transaction, docs/decisions/0055) and
kills itself with SIGKILL inside that transaction, after a named statement and before the
commit. The database must hold exactly what it held before: 16 `pending` rows, no attempt
spent, no Run, no receipt, nothing `recovery_required`. A fresh dispatcher then passes each,
started exactly once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher import clock, ports
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import repositories, stores
from tests.support.actions import submit_runs, submit_runs_as_approver
from tests.support.dispatching import make_dispatcher

REPO = Path(__file__).resolve().parents[2]
DISPATCHES = 16
LEASE_SECONDS = 1.5
VICTIM = "victim"


@dataclasses.dataclass
class Target:
    """One dialect's fresh database: the child's settings and the parent's way in."""

    dialect: str
    env: dict[str, str]
    open_store: Callable[[], Awaitable[ports.Store]]
    settle: Callable[[], Awaitable[None]]
    """Wait until the dead child's database session is gone (PostgreSQL)."""
    sqlite_path: Path | None = None


@contextlib.asynccontextmanager
async def _target(dialect: str, tmp_path: Path) -> AsyncIterator[Target]:
    # The child runs on the system clock, so the rows must be due by it.
    system = clock.SystemClock()
    settings = {
        "QINGLONG_PAGE_SIZE": str(DISPATCHES),
        "QINGLONG_LEASE_SECONDS": str(LEASE_SECONDS),
        "QINGLONG_OWNER_ID": VICTIM,
    }
    if dialect == "sqlite":
        path = tmp_path / "qinglong.db"
        seeding = await stores.open_sqlite(path)
        try:
            await seeding.migrate(now_ms=system.now_ms())
            await submit_runs(seeding, system, DISPATCHES)
        finally:
            await seeding.close()

        async def open_sqlite() -> ports.Store:
            return await stores.open_sqlite(path)

        async def nothing() -> None:
            return None

        env = settings | {"QINGLONG_PROFILE": "edge", "QINGLONG_DATABASE_URL": f"sqlite:///{path}"}
        yield Target(dialect, env, open_sqlite, nothing, sqlite_path=path)
        return
    async with stores.fresh_database() as name:
        await submit_runs_as_approver(name, system, DISPATCHES)

        async def open_postgres() -> ports.Store:
            return await stores.open_postgres(stores.runtime_url(name), max_size=4)

        async def gone() -> None:
            # The server ends the dead client's session (rolling its transaction back) when
            # it sees the socket closed; its row locks would hide rows from SKIP LOCKED.
            sql = (
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                f"AND usename = '{stores.RUNTIME_LOGIN}'"
            )
            deadline = time.monotonic() + 10
            while (await stores.raw(name, sql))[0]["n"] > 0:
                assert time.monotonic() < deadline, "the dead child's session never ended"
                await anyio.sleep(0.02)

        env = settings | {
            "QINGLONG_PROFILE": "cluster",
            "QINGLONG_DATABASE_URL": stores.runtime_url(name),
        }
        yield Target(dialect, env, open_postgres, gone)


def _kill_inside_page(target: Target, cwd: Path, after: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    return subprocess.run(
        [sys.executable, "-m", "tests.support.page_kill", after],
        cwd=cwd,
        env={**clean, **target.env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("after", ["pass_rows", "insert_page_receipts"])
@pytest.mark.parametrize(
    "dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkill_inside_the_passage_commits_nothing_and_each_item_passes_once_after(
    tmp_path: Path, dialect: str, after: str
) -> None:
    async with _target(dialect, tmp_path) as target:
        victim = await anyio.to_thread.run_sync(_kill_inside_page, target, tmp_path, after)
        assert victim.returncode == -signal.SIGKILL, victim.stderr
        await target.settle()
        if target.sqlite_path is not None:
            assert _integrity(target.sqlite_path) == "ok"

        store = await target.open_store()
        try:
            system = clock.SystemClock()
            due = await store.list_due(now_ms=system.now_ms() + 3_600_000, limit=64)
            ids = sorted(row.dispatch_id for row in due)
            assert len(ids) == DISPATCHES
            # Exactly what was there before the passage: waiting, nothing spent or started.
            for dispatch_id in ids:
                row = await store.get_execution(dispatch_id)
                assert row is not None
                assert (row.status, row.attempt, row.lease_owner, row.started_at_ms) == (
                    ExecutionStatus.PENDING,
                    0,
                    None,
                    None,
                )
                events = await store.execution_events(dispatch_id)
                assert [e.to_status for e in events] == [ExecutionStatus.PENDING]
                assert await repositories.runs(store).get_receipt(dispatch_id) is None
                assert (
                    await repositories.runs(store).get_run_by_key(row.project_id, dispatch_id)
                    is None
                )
            far = await store.counts(now_ms=system.now_ms() + 3_600_000)
            assert far.runs == 0
            assert far.executions[EffectiveStatus.EXECUTING] == 0
            assert far.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0

            # No lease to wait out: a fresh owner passes them at once.
            survivor = make_dispatcher(store, system, owner="survivor", page_size=DISPATCHES)
            report = await survivor.dispatch_batch()
            assert report.outcomes["succeeded"] == DISPATCHES, report

            for dispatch_id in ids:
                row = await store.get_execution(dispatch_id)
                assert row is not None
                assert (row.status, row.attempt, row.takeovers, row.lease_owner) == (
                    ExecutionStatus.SUCCEEDED,
                    1,
                    0,
                    "survivor",
                )
                events = await store.execution_events(dispatch_id)
                assert [(e.from_status, e.to_status) for e in events][1:] == [
                    (ExecutionStatus.PENDING, ExecutionStatus.SUCCEEDED)
                ]
                assert (events[1].lease_owner, events[1].attempt) == ("survivor", 1)
                run = await repositories.runs(store).get_run_by_key(row.project_id, dispatch_id)
                assert run is not None
                receipt = await repositories.runs(store).get_receipt(dispatch_id)
                assert receipt is not None
                assert receipt.is_intact()
                assert (receipt.resource_id, receipt.execution_attempt) == (run.run_id, 1)
                assert await store.get_resolution(dispatch_id) is None
            done = await store.counts(now_ms=system.now_ms() + 3_600_000)
            assert done.runs == DISPATCHES  # one Run each: get_run_by_key found each one
            assert done.executions[EffectiveStatus.SUCCEEDED] == DISPATCHES
            assert done.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0
        finally:
            await store.close()
        if target.sqlite_path is not None:
            assert _integrity(target.sqlite_path) == "ok"
