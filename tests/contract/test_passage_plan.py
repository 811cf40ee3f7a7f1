"""A passage reads its page in the due index's order, right after a burst of submits as
later: its cost is a page's, not the backlog's. The plan is the database's own (EXPLAIN of
the store's own statements, bound as the store binds them): with the status index, or a
sort of every due row, each page of a drain would read the whole backlog again."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.contract.test_named_sql import POSTGRES_Q, _sqlite_blocks
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

BACKLOG = 300
DUE_INDEX = "approved_action_dispatch_executions_due"


def _params(clock: ManualClock) -> dict[str, Any]:
    return {"action_type": "run.create", "now_ms": clock.now_ms() + 60_000, "limit": 64}


async def _plan(harness: Harness, clock: ManualClock) -> str:
    params = _params(clock)
    if harness.dialect == "sqlite":
        sql = _sqlite_blocks()["passage_rows"]
        for name, value in params.items():  # EXPLAIN through the harness's plain connection
            sql = sql.replace(f":{name}", repr(value))
        rows = await harness.raw(f"EXPLAIN QUERY PLAN {sql}")
        return "\n".join(str(row["detail"]) for row in rows)
    database = (await harness.raw("SELECT current_database() AS name"))[0]["name"]
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(POSTGRES_Q["passage_plan"].text)
            read = POSTGRES_Q["passage_rows"]
            rows = await conn.fetch(f"EXPLAIN {read.text}", *read.args(params))
        return "\n".join(row[0] for row in rows)
    finally:
        await conn.close()


async def test_a_passage_reads_a_fresh_backlog_in_the_due_index_order(
    harness: Harness, clock: ManualClock
) -> None:
    # Submitted at once and never analysed: the statistics count none of these rows.
    await submit_runs(harness.approver_store, clock, BACKLOG)
    plan = await _plan(harness, clock)
    assert DUE_INDEX in plan, plan
    assert "approved_action_dispatch_executions_status" not in plan, plan
    if harness.dialect == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
    else:
        assert "Sort" not in plan, plan
        assert "Bitmap" not in plan, plan
