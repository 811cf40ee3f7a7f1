"""SQLite gives pruned space back: files are incremental auto-vacuum, old ones converted once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from qinglong_dispatcher.domain import retention, states
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock
from tests.support.dispatching import make_dispatcher


def _pragma(path: Path, name: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


async def test_a_new_file_is_created_in_incremental_auto_vacuum_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
    finally:
        await store.close()
    assert _pragma(path, "auto_vacuum") == 2


async def test_migrate_converts_a_file_of_an_older_release_once_and_keeps_its_rows(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "old.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
        await submit_runs(store, clock, 3)
    finally:
        await store.close()
    # What every file written before this release looks like: no auto-vacuum.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    assert _pragma(path, "auto_vacuum") == 0

    store = await stores.open_sqlite(path)
    try:
        assert await store.migrate(now_ms=START_MS) == []
        counts = await store.counts(now_ms=clock.now_ms())
        assert counts.executions[states.EffectiveStatus.PENDING] == 3
    finally:
        await store.close()
    assert _pragma(path, "auto_vacuum") == 2


async def test_reclaim_space_shrinks_the_file_after_a_prune(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "shrink.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
        for _ in range(5):
            await submit_runs(store, clock, 200)
            while (await make_dispatcher(store, clock, page_size=64).dispatch_batch()).full_page:
                pass
        clock.advance(ms=1)
        filled = _pragma(path, "page_count")
        pruned = await store.prune_batch(
            cutoff_ms=clock.now_ms(), audit_cutoff_ms=START_MS, limit=2000
        )
        # All but the tree holding the newest ledger line, which SQLite keeps (its rowid).
        assert pruned == retention.PruneCounts(dispatches=999, audit_events=0)
        assert _pragma(path, "freelist_count") > 0
        freed = await store.reclaim_space(max_pages=100_000)
    finally:
        await store.close()
    assert freed > 0
    assert _pragma(path, "freelist_count") == 0
    # Most of the file was finished dispatches (the Runs and the notification outbox stay):
    # it is now well under two thirds.
    assert _pragma(path, "page_count") < filled * 2 // 3
    assert path.stat().st_size < filled * 2 // 3 * _pragma(path, "page_size")
