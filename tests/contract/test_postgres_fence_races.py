"""PostgreSQL races that only row locks decide: SKIP LOCKED claims, the run.create effect."""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import repositories, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import request_for, started_execution

pytestmark = pytest.mark.postgres


async def _admin(harness: stores.Harness) -> Any:
    database = await harness.scalar("SELECT current_database() AS db")
    return await asyncpg.connect(stores.pg_url(database), timeout=5)


async def _wait_until_blocked_on_a_lock(admin: Any, *, login: str) -> None:
    """Until a session of `login` waits on a row lock (bounded: a test never hangs here)."""
    with anyio.fail_after(10):
        while True:  # another session's state: nothing to wait on but the catalogue
            waiting = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 "
                "AND datname = current_database() AND wait_event_type = 'Lock'",
                login,
            )
            if waiting:
                return
            await anyio.sleep(0.01)


async def test_a_claim_skips_a_row_another_replica_holds_instead_of_waiting(
    pg: stores.Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(pg.approver_store, clock, 2)
    held, free = sorted(c.dispatch_id for c in consumed)
    admin = await _admin(pg)
    try:
        async with admin.transaction():
            # Another replica's claim transaction, still open on the first due row.
            await admin.execute(
                "SELECT 1 FROM qinglong.approved_action_dispatch_executions "
                "WHERE dispatch_id = $1 FOR UPDATE",
                held,
            )
            started = time.monotonic()
            with anyio.fail_after(3):  # far below the store's 5 s lock_timeout
                batch = await pg.store.claim_due(
                    now_ms=clock.now_ms(), owner="w2", limit=8, lease_ms=LEASE_MS
                )
            waited = time.monotonic() - started
    finally:
        await admin.close()
    assert [c.dispatch_id for c in batch.claimed] == [free]
    assert waited < 1.0, f"claim_due waited {waited:.2f}s on a locked row"


async def test_a_resolution_holding_the_row_makes_the_run_create_effect_a_clean_refusal(
    pg: stores.Harness,
) -> None:
    """The effect's fence is read under the row lock: it waits, then sees the settled row.

    Without the lock the one-statement effect would insert the Run from a stale snapshot and
    then try to turn the resolved `failed` row into `succeeded`.
    """
    clock = ManualClock(int(time.time() * 1000) - LEASE_MS - 5_000)  # lease already past
    await submit_runs(pg.approver_store, clock, 1)
    dispatch, identity = await started_execution(pg, clock)
    request = await request_for(pg, clock, dispatch, identity, run_id="r-race")
    admin = await _admin(pg)
    result: list[ports.RunCreateResult] = []
    failure: list[BaseException] = []
    try:
        tx = admin.transaction()
        await tx.start()
        # A resolution and its row change, committed only once the effect waits behind them.
        await admin.execute(
            "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, resolution, "
            "resolved_by, principal, reason_code, execution_attempt, execution_version, "
            "lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
            "($1, 'manual', 'failed', 'oncall', session_user, 'checked_downstream', $2, $3, "
            "$4, $5, $6, 0)",
            dispatch.dispatch_id,
            identity.attempt,
            identity.version,
            identity.owner,
            identity.token,
            identity.started_at_ms,
        )
        await admin.execute(  # a manual settlement's audit row comes first
            "INSERT INTO qinglong.security_audit_events (kind, actor, principal, project_id, "
            "subject_id, detail_code, committed_at_ms) VALUES ('recovery.manual_resolution', "
            "'oncall', session_user, $2, $1, 'failed:checked_downstream', 0)",
            dispatch.dispatch_id,
            dispatch.project_id,
        )
        await admin.execute(
            "UPDATE qinglong.approved_action_dispatch_executions "
            "SET status = 'failed', version = version + 1, result_code = 'checked_downstream', "
            "completed_at_ms = $2, updated_at_ms = $2 WHERE dispatch_id = $1",
            dispatch.dispatch_id,
            clock.now_ms(),
        )

        async def effect() -> None:
            try:
                result.append(await repositories.runs(pg.store).create_run(request))
            except Exception as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(effect)
            await _wait_until_blocked_on_a_lock(admin, login=stores.RUNTIME_LOGIN)
            await tx.commit()
    finally:
        await admin.close()
    assert failure == [], f"the effect hit an error instead of its fence: {failure!r}"
    (done,) = result
    assert done.outcome is not ports.RunCreateOutcome.CREATED
    assert done.run is None
    assert await pg.scalar("SELECT count(*) AS n FROM qinglong.runs") == 0
    assert await pg.scalar("SELECT count(*) AS n FROM qinglong.approved_run_action_receipts") == 0
    row = await pg.store.get_execution(dispatch.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.FAILED
    events = await pg.store.execution_events(dispatch.dispatch_id)
    assert ExecutionStatus.SUCCEEDED not in [e.to_status for e in events]
