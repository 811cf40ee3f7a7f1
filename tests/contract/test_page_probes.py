"""A page transaction's statements other than its due read probe each item's keys, whatever the
store holds: a page costs a page's reads. The plans are the database's own, EXPLAIN of the
store's own statements bound as the store binds them:

- the read of the effects a page's items took already (`page_effects_taken`), after a history
  of receipts and Runs whose statistics are known. Planned as hashed sub-plans, each page read
  every receipt and every Run ever kept;
- the claim's and the passage's writes of a page (`lease_page`, `pass_rows`), in the page
  transaction (after its `page_plans`), right after a burst of submits that no statistics
  count yet. Planned from the status index, each page read every waiting row and joined it to
  the page."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from qinglong_dispatcher.domain import ids
from tests.support import page_plans
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

HISTORY = 300
BACKLOG = 300
PAGE = 64
EXECUTIONS = "approved_action_dispatch_executions"
WRITES = ("lease_page", "pass_rows")


async def test_a_pages_effects_read_probes_each_item_whatever_the_history(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, HISTORY, project="history")
    the_dispatcher = make_dispatcher(harness.store, clock, page_size=PAGE)
    while (await the_dispatcher.dispatch_batch()).observed:
        pass
    assert (await harness.store.counts(now_ms=clock.now_ms())).runs == HISTORY
    await harness.raw("ANALYZE")
    waiting = await submit_runs(harness.approver_store, clock, PAGE)
    page = json.dumps([{"dispatch_id": c.dispatch_id, "project_id": "proj-1"} for c in waiting])
    plan = await page_plans.plan(harness, "page_effects_taken", {"page": page})
    if harness.dialect == "sqlite":
        # Each subquery names its table by its alias: a SEARCH is a probe, a SCAN reads all.
        for alias in ("r", "x"):
            assert f"SEARCH {alias} USING" in plan, plan
            assert not re.search(rf"^SCAN {alias}\b", plan, re.MULTILINE), plan
    else:
        for table in ("approved_run_action_receipts", "runs"):
            assert re.search(rf"Index (Only )?Scan using \S+ on {table} ", plan), plan
        assert "Seq Scan" not in plan, plan
        assert "hashed SubPlan" not in plan, plan


def _write_params(name: str, page: list[dict[str, Any]], now_ms: int) -> dict[str, Any]:
    if name == "lease_page":
        return {
            "page": json.dumps(page),
            "now_ms": now_ms,
            "owner": "w1",
            "expires_at_ms": now_ms + 30_000,
        }
    rows = [{**row, "mutation_id": f"m-{row['dispatch_id']}"} for row in page]
    return {"page": json.dumps(rows), "now_ms": now_ms, "owner": "w1", "result_code": "ok"}


@pytest.mark.parametrize("name", WRITES)
async def test_a_pages_write_probes_each_row_by_its_key_after_a_burst(
    harness: Harness, clock: ManualClock, name: str
) -> None:
    # Submitted at once and never analysed: the statistics count none of these rows.
    waiting = await submit_runs(harness.approver_store, clock, BACKLOG)
    token = ids.new_lease_token()
    page = [
        {"dispatch_id": c.dispatch_id, "version": 0, "token": token, "proof": "p"}
        for c in waiting[:PAGE]
    ]
    plan = await page_plans.plan(harness, name, _write_params(name, page, clock.now_ms() + 60_000))
    if harness.dialect == "sqlite":
        assert re.search(
            rf"^SEARCH e USING (INDEX sqlite_autoindex_{EXECUTIONS}_1|PRIMARY KEY)",
            plan,
            re.MULTILINE,
        ), plan
        assert not re.search(r"^SCAN e\b", plan, re.MULTILINE), plan
    else:
        assert f"Index Scan using {EXECUTIONS}_pkey on {EXECUTIONS} e" in plan, plan
        assert f"{EXECUTIONS}_status" not in plan, plan
        assert f"{EXECUTIONS}_due" not in plan, plan
        assert f"Seq Scan on {EXECUTIONS}" not in plan, plan
