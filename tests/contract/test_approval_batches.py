"""A submit's batch approves and consumes its requests by their keys, whatever else waits for
a decision: never through a status index, which reads every request that waits. The plans
are the database's own, EXPLAIN of the store's statements right after the waiting requests
were written, before any statistics count them: planned from the waiting requests' index,
each batch read every request waiting for a person's decision."""

from __future__ import annotations

import json
import re

import pytest

from qinglong_dispatcher import api
from tests.support import page_plans
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.stores import Harness

WAITING = 300
BATCH = 50
STATEMENTS = ("approve_approvals", "consume_approvals")


@pytest.mark.parametrize("name", STATEMENTS)
async def test_a_batch_reads_its_requests_by_key_whatever_waits(
    harness: Harness, clock: ManualClock, name: str
) -> None:
    requests = make_api(harness.approver_store, clock)
    waiting = [
        await requests.create_approval(
            "run.create",
            api.run_create_plan(
                {"projectId": "p", "taskId": f"t-{i}", "taskRevision": i}
            ).to_canonical_dict(),
            requested_by="tester",
        )
        for i in range(WAITING)
    ]
    params = {
        "ids": json.dumps([w.approval_request_id for w in waiting[:BATCH]]),
        "decided_by": "approver",
        "principal": "approver",
        "now_ms": clock.now_ms(),
    }
    plan = await page_plans.plan(harness, name, params, page_transaction=False)
    # Never through a status: the waiting requests' index, or every request of a status.
    assert "approval_requests_waiting" not in plan, plan
    assert "approval_requests_by_status" not in plan, plan
    if harness.dialect == "sqlite":
        assert re.search(r"^SEARCH approval_requests USING (INDEX|PRIMARY)", plan, re.M), plan
    else:
        # By key, or, while the table is this small, one pass over it (the cheaper here; the
        # key's probes are as the table grows, where a status index kept reading the waiting).
        assert re.search(
            r"(Index Scan using approval_requests_pkey|Seq Scan) on approval_requests", plan
        ), plan
