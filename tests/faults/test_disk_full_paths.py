"""A full disk on every write path of an edge dispatch (SQLite; `tests.support.disk_full`).

For each write — the start barrier, the `run.create` effect (the page transaction), the
completion, a recovery resolution (manual and by evidence) and the tool start barrier — the
disk is full exactly at that statement. Each must fail with one log event carrying
`code=store_full` (or one typed error to its caller), leave every committed row as it was
before the write, and the work must go on to its end, once, when there is space again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
import structlog

from qinglong_dispatcher import api, bootstrap, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import errors, states
from qinglong_dispatcher.lifecycle import daemon
from tests.support import repositories, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.disk_full import DiskFull, snapshot
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.handlers import RecordingHandler
from tests.support.recovery import plant_run_and_receipt, started_execution
from tests.support.tools import live_run, submit_tool, tool_handlers

FINAL = "NEW.to_status IN ('succeeded', 'failed', 'blocked')"


@pytest.fixture
async def harness(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as opened:
        yield opened


def _store(h: stores.Harness) -> sqlite_store.SqliteStore:
    return cast(sqlite_store.SqliteStore, h.store)


def _store_full_events(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(e["event"]) for e in logs if e.get("code") == errors.StoreFull.code]


def _count(path: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def _started_once(path: Path) -> None:
    most = _count(
        path,
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM execution_events "
        "WHERE to_status = 'executing' OR from_status = 'pending' AND to_status = 'succeeded' "
        "GROUP BY dispatch_id)",
    )
    assert most == 1, "a dispatch was started twice"  # a start barrier, or a passage


async def test_start_barrier(harness: stores.Harness, clock: ManualClock) -> None:
    store = _store(harness)
    (consumed,) = await submit_runs(store, clock, 1)
    handler = RecordingHandler()  # an action with a separate completion: the per-item path
    disk = await DiskFull(store).install("execution_events", "NEW.to_status = 'executing'")
    disk.full = True
    with structlog.testing.capture_logs() as logs:
        report = await make_dispatcher(
            store, clock, handlers={"run.create": handler}
        ).dispatch_batch()
    assert dict(report.outcomes) == {"start_failed": 1}
    assert _store_full_events(logs) == ["dispatch.start_failed"]  # no replay storm
    assert snapshot(store.db.path) == disk.seen[0]  # as before the barrier: leased, unstarted
    assert handler.executed == []

    await disk.space_back()
    clock.advance(ms=LEASE_MS + 1)  # the failed start's lease runs out; the item is claimed again
    report = await make_dispatcher(store, clock, handlers={"run.create": handler}).dispatch_batch()
    assert dict(report.outcomes) == {"succeeded": 1}
    assert handler.executed == [consumed.dispatch_id]
    _started_once(store.db.path)


async def test_run_create_effect_in_the_page_transaction(
    harness: stores.Harness, clock: ManualClock
) -> None:
    store = _store(harness)
    await submit_runs(store, clock, 3)
    settings = load_settings(
        profile="edge",
        database_url=f"sqlite:///{store.db.path}",
        environ={"QINGLONG_OWNER_ID": "w1"},
    )
    the_daemon = daemon.Daemon(bootstrap.build_daemon_parts(settings, store, clock))
    disk = await DiskFull(store).install("runs")
    disk.full = True
    with structlog.testing.capture_logs() as logs:
        assert await the_daemon.tick() is False
    # One event for the tick (the store is not writable until there is space again); the
    # passage was not handed to the claim, whose per-item path would have committed start
    # barriers that no effect could follow.
    assert _store_full_events(logs) == ["daemon.store_not_writable"]
    assert snapshot(store.db.path) == disk.seen[0]
    assert (
        _count(store.db.path, "SELECT count(*) FROM execution_events WHERE to_status = 'executing'")
        == 0
    )

    await disk.space_back()
    clock.advance(ms=LEASE_MS + 1)
    assert await the_daemon.tick() is True
    statuses = _count(
        store.db.path,
        "SELECT count(*) FROM approved_action_dispatch_executions WHERE status = 'succeeded'",
    )
    assert statuses == 3
    assert _count(store.db.path, "SELECT count(*) FROM runs") == 3
    _started_once(store.db.path)


async def test_run_create_effect_on_the_per_item_path(
    harness: stores.Harness, clock: ManualClock
) -> None:
    store = _store(harness)
    await submit_runs(store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    # Full for the first effect only: the retry, under the same fence, finds space again.
    disk = await DiskFull(store).install("runs")
    disk.full = disk.once = True
    handler = bootstrap.handlers(store, clock)["run.create"]
    ctx = ports.ExecutionContext(
        dispatch=dispatch, identity=identity, deadline_ms=clock.now_ms() + LEASE_MS // 2
    )
    with structlog.testing.capture_logs() as logs:
        result = await handler.execute(ctx)
    assert disk.failures == 1
    assert _store_full_events(logs) == ["run_create.effect_retry"]
    assert disk.seen[1] == disk.seen[0]  # the failed effect left nothing behind
    assert result.kind is ports.ExecuteKind.COMMITTED
    assert _count(store.db.path, "SELECT count(*) FROM runs") == 1
    assert _count(store.db.path, "SELECT count(*) FROM approved_run_action_receipts") == 1
    execution = await store.get_execution(dispatch.dispatch_id)
    assert execution is not None
    assert execution.status is states.ExecutionStatus.SUCCEEDED


async def test_completion_then_manual_resolution(
    harness: stores.Harness, clock: ManualClock
) -> None:
    store = _store(harness)
    (consumed,) = await submit_runs(store, clock, 1)
    handler = RecordingHandler()
    completion = await DiskFull(store).install("execution_events", FINAL)
    completion.full = True
    with structlog.testing.capture_logs() as logs:
        report = await make_dispatcher(
            store, clock, handlers={"run.create": handler}
        ).dispatch_batch()
    assert dict(report.outcomes) == {"completion_write_failed": 1}
    assert _store_full_events(logs) == ["dispatch.completion_write_failed"]
    assert snapshot(store.db.path) == completion.seen[0]  # still executing, as started
    assert handler.executed == [consumed.dispatch_id]  # executed once, never again

    # The lease runs out: recovery_required. The operator's resolution meets a full disk too.
    clock.advance(ms=LEASE_MS + 1)
    resolution = await DiskFull(store).install("recovery_resolutions")
    resolution.full = True
    before = snapshot(store.db.path)
    with pytest.raises(errors.StoreFull):
        await api.resolve_manually(
            store,
            clock,
            consumed.dispatch_id,
            resolution=states.Completion.SUCCEEDED,
            operator="oncall-1",
            reason="checked_by_hand",
        )
    assert resolution.failures == 1
    assert snapshot(store.db.path) == before

    await completion.space_back()
    await resolution.space_back()
    await api.resolve_manually(
        store,
        clock,
        consumed.dispatch_id,
        resolution=states.Completion.SUCCEEDED,
        operator="oncall-1",
        reason="checked_by_hand",
    )
    execution = await store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert execution.status is states.ExecutionStatus.SUCCEEDED
    assert _count(store.db.path, "SELECT count(*) FROM recovery_resolutions") == 1
    assert handler.executed == [consumed.dispatch_id]


async def test_resolution_by_evidence(harness: stores.Harness, clock: ManualClock) -> None:
    store = _store(harness)
    await submit_runs(store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    await plant_run_and_receipt(harness, clock, dispatch, identity)
    clock.advance(ms=LEASE_MS + 1)
    disk = await DiskFull(store).install("recovery_resolutions")
    disk.full = True
    reconciler = bootstrap.build_reconciler(store, clock)
    with pytest.raises(errors.StoreFull):  # the daemon's loop logs it once: recovery.pass_failed
        await reconciler.reconcile_pass()
    assert snapshot(store.db.path) == disk.seen[0]

    await disk.space_back()
    report = await reconciler.reconcile_pass()
    assert dict(report.outcomes) == {"resolved_succeeded": 1}
    execution = await store.get_execution(dispatch.dispatch_id)
    assert execution is not None
    assert execution.status is states.ExecutionStatus.SUCCEEDED
    assert _count(store.db.path, "SELECT count(*) FROM recovery_resolutions") == 1


async def test_tool_start_barrier(
    harness: stores.Harness, clock: ManualClock, tmp_path: Path
) -> None:
    store = _store(harness)
    run = await live_run(harness, clock)
    submitted = await submit_tool(harness, clock, run, "space, at last\n")
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    # Full for the first barrier write only: space comes back before the retry, which the
    # tool's execute makes under the same fence (the failed transaction rolled back whole).
    disk = await DiskFull(store).install("tool_execution_start_barriers")
    disk.full = disk.once = True
    the_dispatcher = make_dispatcher(store, clock, handlers=tool_handlers(store, clock, sandbox))
    with structlog.testing.capture_logs() as logs:
        report = await the_dispatcher.dispatch_batch()
    assert disk.failures == 1
    assert _store_full_events(logs) == ["tool.store_retry"]
    # What the failure left (seen as the retry wrote its barrier) is what was there before it.
    assert len(disk.seen) == 2
    assert disk.seen[1] == disk.seen[0]
    assert dict(report.outcomes) == {"succeeded": 1}
    assert _count(store.db.path, "SELECT count(*) FROM tool_execution_start_barriers") == 1
    files = [p for p in sandbox.rglob("*") if p.is_file()]
    assert [p.read_text() for p in files] == ["space, at last\n"]
    step = await repositories.steps(store).get_step_run(submitted.step_run_id)
    assert step is not None
    assert step.status.value == "succeeded"
    _started_once(store.db.path)
