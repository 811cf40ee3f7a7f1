"""A page's read of the effects its items took already (`page_effects_taken`) probes each
item's keys, whatever history the store keeps: a page costs a page's reads. The plan is the
database's own, EXPLAIN of the store's own statement after the history's statistics are
known. Had the planner hashed the whole receipts and Runs tables for each page, every page of
a drain would read every receipt and every Run ever kept."""

from __future__ import annotations

import json
import re

import asyncpg

from tests.contract.test_named_sql import POSTGRES_Q, _sqlite_blocks
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

HISTORY = 300
PAGE = 64
READ = "page_effects_taken"
HISTORY_TABLES = ("approved_run_action_receipts", "runs")


async def _history(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, HISTORY, project="history")
    the_dispatcher = make_dispatcher(harness.store, clock, page_size=PAGE)
    while (await the_dispatcher.dispatch_batch()).observed:
        pass
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.runs == HISTORY


async def _plan(harness: Harness, page: str) -> str:
    if harness.dialect == "sqlite":
        await harness.raw("ANALYZE")
        sql = _sqlite_blocks()[READ].replace(":page", "'" + page + "'")
        rows = await harness.raw(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row["detail"]) for row in rows)
    database = (await harness.raw("SELECT current_database() AS name"))[0]["name"]
    await harness.raw("ANALYZE")
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        statement = POSTGRES_Q[READ]
        rows = await conn.fetch(f"EXPLAIN {statement.text}", *statement.args({"page": page}))
        return "\n".join(row[0] for row in rows)
    finally:
        await conn.close()


async def test_a_pages_effects_read_probes_each_item_whatever_the_history(
    harness: Harness, clock: ManualClock
) -> None:
    await _history(harness, clock)
    waiting = await submit_runs(harness.approver_store, clock, PAGE)
    page = json.dumps([{"dispatch_id": c.dispatch_id, "project_id": "proj-1"} for c in waiting])
    plan = await _plan(harness, page)
    if harness.dialect == "sqlite":
        # Each subquery names its table by its alias: a SEARCH is a probe, a SCAN reads all.
        for alias in ("r", "x"):
            assert f"SEARCH {alias} USING" in plan, plan
            assert not re.search(rf"^SCAN {alias}\b", plan, re.MULTILINE), plan
    else:
        for table in HISTORY_TABLES:
            assert re.search(rf"Index (Only )?Scan using \S+ on {table} ", plan), plan
        assert "Seq Scan" not in plan, plan
        assert "hashed SubPlan" not in plan, plan
