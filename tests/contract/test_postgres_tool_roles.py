"""PostgreSQL least privilege for tool steps (docs/decisions/0019)."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support import repositories, stores, tools
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

APPEND_ONLY = {
    "tool_execution_start_barriers": "policy_fence = policy_fence",
    "step_run_mutations": "reason_code = reason_code",
    "trace_anchors": "trace_digest = trace_digest",
    "audit_receipts": "receipt_digest = receipt_digest",
}


@pytest.fixture
async def started(clock: ManualClock) -> AsyncIterator[tuple[str, tools.Started]]:
    """A database with one committed start barrier, made by the runtime login."""
    async with stores.fresh_database() as name:
        store = await stores.open_postgres(stores.runtime_url(name), max_size=2)
        approver = await stores.open_postgres(stores.approver_url(name), max_size=1)
        try:
            # The helpers need only the stores: submitting approves, so it is the approver's.
            harness: Any = types.SimpleNamespace(store=store, approver_store=approver)
            run = await tools.live_run(harness, clock)
            one = await tools.started_tool(harness, clock, run)
            assert (await repositories.steps(store).prepare(one.command())).barrier is not None
        finally:
            await store.close()
            await approver.close()
        yield name, one


@pytest.mark.parametrize("table", sorted(APPEND_ONLY))
async def test_runtime_may_not_update_delete_or_truncate_barrier_ledger_or_audit(
    started: tuple[str, tools.Started], table: str
) -> None:
    name, _ = started
    url = stores.runtime_url(name)
    for sql in (
        f"UPDATE qinglong.{table} SET {APPEND_ONLY[table]}",
        f"DELETE FROM qinglong.{table}",
        f"TRUNCATE qinglong.{table} CASCADE",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await stores.as_login(url, sql)
    assert (await stores.as_login(url, f"SELECT count(*) AS n FROM qinglong.{table}"))[0]["n"] == 1


async def test_even_the_owner_cannot_rewrite_a_barrier(started: tuple[str, tools.Started]) -> None:
    name, _ = started
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await stores.raw(name, "UPDATE qinglong.tool_execution_start_barriers SET run_version = 1")


async def test_operator_reads_no_barrier_and_moves_only_step_run_state_columns(
    started: tuple[str, tools.Started],
) -> None:
    name, one = started
    url = stores.operator_url(name)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await stores.as_login(url, "SELECT count(*) FROM qinglong.tool_execution_start_barriers")
    where = f"WHERE step_run_id = '{one.step.step_run_id}'"
    # What a blocked resolution writes (running → lost): state columns only.
    await stores.as_login(
        url,
        "UPDATE qinglong.step_runs SET status = 'lost', version = version + 1, "
        f"updated_at_ms = updated_at_ms {where}",
    )
    for forbidden in (
        f"UPDATE qinglong.step_runs SET action_digest = action_digest {where}",
        f"UPDATE qinglong.step_runs SET approval_request_id = NULL {where}",
        "DELETE FROM qinglong.step_runs",
        "INSERT INTO qinglong.trace_anchors SELECT * FROM qinglong.trace_anchors",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stores.as_login(url, forbidden)
    for readable in ("step_runs", "step_run_mutations", "trace_anchors", "audit_receipts"):
        assert await stores.as_login(url, f"SELECT count(*) FROM qinglong.{readable}")
