"""The inbox reads the notes of a page of requests and dispatches through the notes' two
indexes, whatever the notes kept: its cost is the page's notes, not every note ever written.
The plan is the database's own, EXPLAIN of the store's statement after the notes' statistics
are known."""

from __future__ import annotations

import json

from tests.support import page_plans
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

SUBJECTS = 400
NOTES_EACH = 5

_KEPT = {
    "postgres": (
        "INSERT INTO qinglong.inbox_notes ({column}, principal, note, written_at_ms) "
        "SELECT s.{column}, qinglong.acting_principal(), 'kept', 0 "
        f"FROM qinglong.{{table}} AS s, generate_series(1, {NOTES_EACH})"
    ),
    "sqlite": (
        f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {NOTES_EACH}) "
        "INSERT INTO inbox_notes ({column}, principal, note, written_at_ms) "
        "SELECT s.{column}, 'ops', 'kept', 0 FROM {table} AS s, g"
    ),
}
SUBJECT_TABLES = {
    "approval_request_id": "approval_requests",
    "dispatch_id": "approved_action_dispatches",
}


async def test_the_notes_of_a_page_are_read_through_their_indexes(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, SUBJECTS)
    for column, table in SUBJECT_TABLES.items():  # notes on every request and dispatch
        await harness.raw(_KEPT[harness.dialect].format(column=column, table=table))
    await harness.raw("ANALYZE")
    params = {
        "approval_ids": json.dumps([c.approval_request_id for c in consumed[:2]]),
        "dispatch_ids": json.dumps([consumed[2].dispatch_id]),
    }
    plan = await page_plans.plan(harness, "select_notes", params, page_transaction=False)
    for index in ("inbox_notes_approval", "inbox_notes_dispatch"):
        assert index in plan, plan
    if harness.dialect == "postgres":
        assert "hashed SubPlan" not in plan, plan
        assert "Seq Scan on inbox_notes" not in plan, plan
