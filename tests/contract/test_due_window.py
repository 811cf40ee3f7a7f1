"""A claim that skips the actions of full passages looks among the next `SKIPPING_WINDOW` due
rows only: behind a backlog of those actions it costs that window, not the backlog. Without
it the claim walked every due row ahead of the first it could take (42 ms behind 20,000
waiting `run.create` on PostgreSQL; 23 ms on SQLite, holding the file's one write lock), every
sixteenth batch while passages were full."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.adapters.postgres import queries as postgres_queries
from qinglong_dispatcher.adapters.sql import executions
from tests.support import page_plans, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness
from tests.support.targets import submit_change

WINDOW = executions.SKIPPING_WINDOW
DUE_INDEX = "approved_action_dispatch_executions_due"


async def _backlog_then_a_change(harness: Harness, clock: ManualClock, backlog: int) -> str:
    """`backlog` waiting run.create, then one row of another action, due after all of them."""
    await submit_runs(harness.approver_store, clock, backlog)
    clock.advance(ms=1)
    return await submit_change(harness.approver_store, clock, "act-1", None)


async def _status(harness: Harness, dispatch_id: str) -> str:
    table = "qinglong." if harness.dialect == "postgres" else ""
    (row,) = await harness.raw(
        f"SELECT status FROM {table}approved_action_dispatch_executions "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )
    return str(row["status"])


async def _claim_skipping_run_create(harness: Harness, clock: ManualClock) -> Any:
    return await harness.store.claim_due(
        now_ms=clock.now_ms() + 1,
        owner="w1",
        limit=64,
        lease_ms=30_000,
        skip_action_types={"run.create"},
    )


async def test_a_skipping_claim_takes_another_actions_row_within_the_window(
    harness: Harness, clock: ManualClock
) -> None:
    change = await _backlog_then_a_change(harness, clock, WINDOW - 1)
    batch = await _claim_skipping_run_create(harness, clock)
    assert [claim.dispatch_id for claim in batch.claimed] == [change]
    assert await _status(harness, change) == "leased"


async def test_a_skipping_claim_does_not_read_past_the_window(
    harness: Harness, clock: ManualClock
) -> None:
    change = await _backlog_then_a_change(harness, clock, WINDOW)
    batch = await _claim_skipping_run_create(harness, clock)
    assert (batch.observed, list(batch.claims)) == (0, [])
    assert await _status(harness, change) == "pending"
    # Not skipping, the claim reads on as before: its page is the first due rows.
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms() + 1, owner="w1", limit=64, lease_ms=30_000
    )
    assert len(batch.claimed) == 64
    assert change not in {claim.dispatch_id for claim in batch.claimed}


async def test_behind_a_larger_backlog_the_skipping_claim_reads_one_window(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, WINDOW + 300)
    params = {
        "now_ms": clock.now_ms() + 1,
        "limit": 64,
        "skip_action_types": json.dumps(["run.create"]),
        "ahead": WINDOW,
    }
    if harness.dialect == "sqlite":
        # The window's last key is the due index's upper bound: the search stops there.
        plan = await page_plans.plan(harness, "claim_due_rows", params)
        assert f"SEARCH e USING INDEX {DUE_INDEX}" in plan, plan
        assert "(eligible_at_ms,dispatch_id)<(?,?)" in plan, plan
        return
    assert await _due_rows_read(harness, "claim_due_rows", params) == WINDOW


async def _due_rows_read(harness: Harness, name: str, params: dict[str, Any]) -> int:
    """Rows the due index gave the statement, run as a page transaction runs it."""
    statements = postgres_queries.load(stores.TABLES.statements)
    database = (await harness.raw("SELECT current_database() AS name"))[0]["name"]
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(statements["page_plans"].text)
            statement = statements[name]
            (row,) = await conn.fetch(
                f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.text}", *statement.args(params)
            )
    finally:
        await conn.close()
    nodes = [json.loads(row[0])[0]["Plan"]]
    read = 0
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Index Name") == DUE_INDEX:
            read += int(node["Actual Rows"]) * int(node["Actual Loops"])
    return read


@pytest.mark.postgres
@pytest.mark.parametrize("skipping", [False, True])
async def test_two_replicas_open_claims_observe_disjoint_rows(
    pg: Harness, clock: ManualClock, skipping: bool
) -> None:
    """As two replicas run it at once (the runtime login, each after `page_plans`): while one
    claim transaction is open, the other skips the rows it locked, through the window too."""
    await submit_runs(pg.approver_store, clock, 4)
    change = await _backlog_then_a_change(pg, clock, 0)
    statements = postgres_queries.load(stores.TABLES.statements)
    statement, plans = statements["claim_due_rows"], statements["page_plans"].text
    skip = ["run.create"] if skipping else []

    def observe(limit: int) -> list[object]:
        return statement.args(
            {
                "now_ms": clock.now_ms() + 1,
                "limit": limit,
                "skip_action_types": json.dumps(skip),
                "ahead": WINDOW if skipping else 0,
            }
        )

    database = (await pg.raw("SELECT current_database() AS name"))[0]["name"]
    url = stores.runtime_url(database)
    one, two = await asyncpg.connect(url, timeout=5), await asyncpg.connect(url, timeout=5)
    try:
        async with one.transaction():
            await one.execute(plans)
            first = [r["dispatch_id"] for r in await one.fetch(statement.text, *observe(2))]
            async with two.transaction():
                await two.execute(plans)
                second = [r["dispatch_id"] for r in await two.fetch(statement.text, *observe(16))]
    finally:
        await one.close()
        await two.close()
    assert first
    assert not set(first) & set(second)
    assert len(first) + len(second) == (1 if skipping else 5)
    if skipping:
        assert first == [change]
