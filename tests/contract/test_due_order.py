"""The due reads (the claim's, a passage's) take their page in the due index's order, right
after a burst of submits as later: a page costs a page's reads, not the backlog's. The plan is
the database's own: EXPLAIN of the store's own statements, bound as the store binds them, after
its `page_plans`. With the status index, or a sort of every due row, each page of a drain would
read the whole backlog again."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qinglong_dispatcher.adapters.sql import executions
from tests.support import page_plans
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

BACKLOG = 300
DUE_INDEX = "approved_action_dispatch_executions_due"
READS = ("passage_rows", "claim_due_rows", "claim_due_rows skipping")


def _params(read: str, clock: ManualClock) -> dict[str, Any]:
    skipping = read.endswith(" skipping")
    now_ms = clock.now_ms() + 60_000
    if read == "passage_rows":
        return {"action_type": "run.create", "now_ms": now_ms, "limit": 64}
    return {
        "now_ms": now_ms,
        "limit": 64,
        "skip_action_types": json.dumps(["run.create"] if skipping else []),
        "ahead": executions.SKIPPING_WINDOW if skipping else 0,
    }


@pytest.mark.parametrize("read", READS)
async def test_a_due_read_takes_a_fresh_backlog_in_the_due_index_order(
    harness: Harness, clock: ManualClock, read: str
) -> None:
    # Submitted at once and never analysed: the statistics count none of these rows.
    await submit_runs(harness.approver_store, clock, BACKLOG)
    plan = await page_plans.plan(harness, read.split()[0], _params(read, clock))
    assert DUE_INDEX in plan, plan
    assert "approved_action_dispatch_executions_status" not in plan, plan
    if harness.dialect == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
    else:
        assert "Sort" not in plan, plan
        assert "Bitmap" not in plan, plan
