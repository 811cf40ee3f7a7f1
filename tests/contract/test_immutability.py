"""Immutable tables refuse UPDATE and DELETE in the database itself."""

from __future__ import annotations

import pytest

from tests.support import faults
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

IMMUTABLE = {
    "action_plans": "plan_digest = plan_digest",
    "approved_action_dispatches": "approved_by = approved_by",
    "execution_events": "result_code = result_code",
    "approved_run_action_receipts": "result_code = result_code",
    "run_events": "event_type = event_type",
}


async def _fill(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    report = await make_dispatcher(harness.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 1


@pytest.mark.parametrize("name", sorted(IMMUTABLE))
async def test_immutable_tables_refuse_update_and_delete(
    harness: Harness, clock: ManualClock, name: str
) -> None:
    await _fill(harness, clock)
    table = faults.table(harness, name)
    assert await harness.scalar(f"SELECT count(*) AS n FROM {table}") >= 1
    with pytest.raises(Exception, match=r"immutable|permission denied"):
        await harness.raw(f"UPDATE {table} SET {IMMUTABLE[name]}")
    with pytest.raises(Exception, match=r"immutable|permission denied"):
        await harness.raw(f"DELETE FROM {table}")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {table}") >= 1
