"""Execution windows for the tests of migration 0035: a policy with a window on the target
test action, and reads of the window the database copied."""

from __future__ import annotations

import pathlib
from typing import Any

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import approval_policies, plans
from qinglong_dispatcher.usecases import approving, consuming, requesting
from tests.support import faults, stores
from tests.support.targets import MODELS, TARGET_TYPE

SETTINGS = api.Policy(approval_ttl_ms=600_000, max_attempts=5)


async def window_policy(
    h: stores.Harness, *, delay_ms: int | None = None, window_ms: int | None = None
) -> None:
    """The `windowed` policy for the target test action, written by the owner."""
    owner = await h.owner()
    await owner.set_policy(
        approval_policies.NewPolicy(
            name="windowed",
            action_type=TARGET_TYPE,
            not_before_delay_ms=delay_ms,
            window_ms=window_ms,
        )
    )


async def another_approver(h: stores.Harness) -> ports.Store:
    """A store of a principal other than the requester, who may vote under the policy: on
    PostgreSQL the approver login without self-approval, on SQLite another OS principal."""
    if h.dialect == "postgres":
        database = str(await h.scalar("SELECT current_database()"))
        return await stores.open_postgres(stores.strict_approver_url(database), max_size=1)
    path = await h.scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
    return await stores.open_sqlite(
        pathlib.Path(path), busy_timeout_s=5.0, principal="windows-approver"
    )


async def submit_windowed(
    h: stores.Harness, clock: ports.Clock, action_ref: str, router: str | None
) -> str:
    """Request one change (its request copies the policy in force), approve it as another
    principal (the requester's own vote is refused under a policy) and consume it; its
    dispatch id."""
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": action_ref, "projectId": "p1", "router": router},
        models=MODELS,
    )
    created = await requesting.request_approval(
        h.approver_store, clock, SETTINGS, plan, requested_by="tester"
    )
    request = created.approval_request_id
    other = await another_approver(h)
    try:
        await approving.approve(other, clock, request, decided_by="approver")
    finally:
        await other.close()
    consumed = await consuming.consume(h.approver_store, clock, SETTINGS, request)
    return consumed.dispatch_id


async def execution(h: stores.Harness, dispatch_id: str) -> dict[str, Any]:
    """The execution row of `dispatch_id`, every column."""
    table = faults.table(h, "approved_action_dispatch_executions")
    (row,) = await h.raw(f"SELECT * FROM {table} WHERE dispatch_id = '{dispatch_id}'")
    return dict(row)


async def dispatch_window(h: stores.Harness, dispatch_id: str) -> tuple[Any, Any]:
    """(not_before_ms, not_after_ms) of the dispatch row."""
    table = faults.table(h, "approved_action_dispatches")
    (row,) = await h.raw(
        f"SELECT not_before_ms, not_after_ms FROM {table} WHERE dispatch_id = '{dispatch_id}'"
    )
    return row["not_before_ms"], row["not_after_ms"]


async def database_now_ms(h: stores.Harness) -> int:
    """The database's clock, as the window triggers read it."""
    if h.dialect == "postgres":
        return int(await h.scalar("SELECT qinglong.db_now_ms()"))
    return int(
        await h.scalar("SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)")
    )
