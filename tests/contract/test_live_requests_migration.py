"""Migrating a database that already holds two live requests for one plan (migration
live_requests): the migration refuses whole, writes nothing, and applies once the operator
has rejected the extra request (docs/operations.md#one-request-per-plan)."""

from __future__ import annotations

import time

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors
from tests.support import faults, stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import START_MS, ManualClock

SLUG = "live_requests"


async def _undo(h: stores.Harness) -> None:
    """The database as it was before the migration: its objects and its ledger line gone."""
    if h.dialect == "sqlite":
        for drop in (
            "DROP INDEX approval_requests_one_live_per_plan",
            "DROP INDEX approved_action_dispatches_one_per_plan",
            "DROP TRIGGER security_audit_events_subject_finished",
        ):
            await h.raw(drop)
    else:
        for drop in (
            "DROP INDEX qinglong.approval_requests_one_live_per_plan",
            "DROP INDEX qinglong.approved_action_dispatches_one_per_plan",
            "DROP TRIGGER security_audit_events_subject_finished ON qinglong.security_audit_events",
            "DROP FUNCTION qinglong.guard_audit_subject_delete()",
            "DROP FUNCTION qinglong.audit_subject_finished(text, bigint)",
        ):
            await h.raw(drop)
    await h.raw(f"DELETE FROM {faults.table(h, 'schema_migrations')} WHERE name = '{SLUG}'")


async def _admin_store(h: stores.Harness) -> tuple[ports.Store, bool]:
    """A store that may migrate (PostgreSQL: the administrator), and whether to close it."""
    if h.dialect == "sqlite":
        return h.store, False
    database = str(await h.scalar("SELECT current_database()"))
    store = await stores.open_postgres(
        stores.pg_url(database), max_size=1, installation=stores.INSTALLATION
    )
    return store, True


async def _ledger(h: stores.Harness) -> list[str]:
    rows = await h.raw(f"SELECT name FROM {faults.table(h, 'schema_migrations')} ORDER BY 1")
    return [row["name"] for row in rows]


async def test_two_live_requests_for_one_plan_stop_the_migration_until_one_is_rejected(
    harness: stores.Harness,
) -> None:
    now = ManualClock(int(time.time() * 1000))
    (consumed,) = await submit_runs(harness.approver_store, now, 1)
    await _undo(harness)
    # What the attack left: a pending copy of the consumed request, written past the store.
    requests = faults.table(harness, "approval_requests")
    principal = "session_user" if harness.dialect == "postgres" else "'mallory'"
    db_expiry = "NULL"
    if harness.dialect == "sqlite":
        db_expiry = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 600000"
    await harness.raw(
        f"INSERT INTO {requests} (approval_request_id, project_id, action_type, action_ref, "
        "action_digest, status, version, requested_by, requested_principal, expires_at_ms, "
        "created_at_ms, updated_at_ms, db_expires_at_ms) SELECT 'a-copy', project_id, "
        f"action_type, action_ref, action_digest, 'pending', 1, 'mallory', {principal}, "
        f"{now.ms + 600_000}, {now.ms}, {now.ms}, {db_expiry} FROM {requests} "
        f"WHERE approval_request_id = '{consumed.approval_request_id}'"
    )
    ledger = await _ledger(harness)
    rows = await harness.raw(f"SELECT * FROM {requests} ORDER BY 1")
    admin, close = await _admin_store(harness)
    try:
        with pytest.raises(errors.StoreError) as refused:
            await admin.migrate(now_ms=START_MS)
        assert refused.value.code == "constraint_violation"
        assert await _ledger(harness) == ledger
        assert await harness.raw(f"SELECT * FROM {requests} ORDER BY 1") == rows
        assert not (await admin.schema_state()).current

        # The remedy the docs give: reject the extra request; then the migration applies.
        await make_api(harness.approver_store, now).reject("a-copy", decided_by="operator")
        assert len(await admin.migrate(now_ms=START_MS)) == 1
        assert SLUG in await _ledger(harness)
        assert (await admin.schema_state()).current
    finally:
        if close:
            await admin.close()
