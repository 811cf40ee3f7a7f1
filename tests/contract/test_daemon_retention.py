"""The edge daemon prunes itself on the reconcile cadence when a retention is set."""

from __future__ import annotations

from pathlib import Path

import anyio

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import retention
from qinglong_dispatcher.lifecycle import daemon
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock
from tests.support.dispatching import make_dispatcher


async def test_the_edge_daemon_prunes_finished_trees_older_than_its_retention(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "edge.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
        old = await submit_runs(store, clock, 2, project="old")
        assert (await make_dispatcher(store, clock).dispatch_batch()).outcomes["succeeded"] == 2
        clock.advance(ms=2 * retention.DAY_MS)
        (young,) = await submit_runs(store, clock, 1, project="young")
        settings = load_settings(
            environ={
                "QINGLONG_DATABASE_URL": f"sqlite:///{path}",
                "QINGLONG_CADENCE_SECONDS": "0.05",
                "QINGLONG_RECONCILE_SECONDS": "0.05",
                "QINGLONG_RETENTION_DAYS": "1",
            }
        )
        parts = bootstrap.build_daemon_parts(settings, store, clock)
        assert parts.pruner is not None
        the_daemon = daemon.Daemon(parts)
        async with anyio.create_task_group() as tg:
            tg.start_soon(the_daemon.run)
            with anyio.fail_after(10):
                for _ in range(1000):
                    if all([await store.get_dispatch(c.dispatch_id) is None for c in old]):
                        break
                    await anyio.sleep(0.02)
            the_daemon.request_stop()
        assert all([await store.get_dispatch(c.dispatch_id) is None for c in old])
        # The young one was dispatched meanwhile and finished now: inside its retention.
        kept = await store.get_execution(young.dispatch_id)
        assert kept is not None
        assert kept.status == "succeeded"
        assert b"qinglong_dispatcher_pruned_dispatches_total 2.0" in parts.metrics.render()
    finally:
        await store.close()


async def test_without_a_retention_the_daemon_prunes_nothing(tmp_path: Path) -> None:
    settings = load_settings(
        environ={"QINGLONG_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"},
        overrides={"retention_days": 0},
    )
    store = await stores.open_sqlite(tmp_path / "x.db")
    try:
        assert bootstrap.build_daemon_parts(settings, store, ManualClock()).pruner is None
        edge = load_settings(environ={"QINGLONG_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"})
        assert edge.retention_days == 14
        assert bootstrap.build_daemon_parts(edge, store, ManualClock()).pruner is not None
    finally:
        await store.close()
