"""The audit of a live subject stays (migration live_requests): even under an audit permit, the
pruner cannot delete the audit records of a request still pending or approved within its
lifetime, or of a dispatch whose execution has not finished. The attacks run as the documented
role (PostgreSQL: a login granted `qinglong_pruner`; SQLite: a plain connection to the file),
permit and delete in one transaction, and assert the database's own refusal and that nothing
changed; the same statements for a finished subject pass."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from tests.support import faults, stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock

LIVE_SUBJECT = "security_audit_events: the audit of a live subject stays"


@pytest.fixture
def now() -> ManualClock:
    """The real clock: a request's lifetime runs on the database's clock."""
    return ManualClock(int(time.time() * 1000))


def _plan(action_ref: str) -> dict[str, Any]:
    fields = {"projectId": "p", "taskId": "t", "taskRevision": 1, "actionRef": action_ref}
    return api.run_create_plan(fields).to_canonical_dict()


async def _subjects(h: stores.Harness, now: ManualClock) -> dict[str, str]:
    """One subject of each kind: name → the subject id its audit records name."""
    the_api = make_api(h.approver_store, now)
    pending = await the_api.create_approval("run.create", _plan("act-1"), requested_by="alice")
    approved = await the_api.create_approval("run.create", _plan("act-2"), requested_by="alice")
    await the_api.approve(approved.approval_request_id, decided_by="bob")
    rejected = await the_api.create_approval("run.create", _plan("act-3"), requested_by="alice")
    await the_api.reject(rejected.approval_request_id, decided_by="bob")
    (consumed,) = await submit_runs(h.approver_store, now, 1)  # its dispatch waits, pending
    # A record naming the dispatch (as a plan read, a resolution or an API consume does).
    principal = "session_user" if h.dialect == "postgres" else "'x'"
    await h.raw(
        f"INSERT INTO {faults.table(h, 'security_audit_events')} (kind, actor, principal, "
        f"project_id, subject_id, detail_code, committed_at_ms) VALUES ('dispatch.noted', 'x', "
        f"{principal}, 'proj-1', '{consumed.dispatch_id}', 'run.create', 1)"
    )
    return {
        "pending": pending.approval_request_id,
        "approved": approved.approval_request_id,
        "consumed_waiting": consumed.approval_request_id,
        "dispatch_waiting": consumed.dispatch_id,
        "rejected": rejected.approval_request_id,
    }


async def _prune_by_hand(h: stores.Harness, subject_id: str) -> BaseException | None:
    """As the pruner, in one transaction: an audit permit up to the database's now, and the
    subject's audit records deleted. The database's refusal, or None (then committed)."""
    await anyio.sleep(0.01)  # the records' millisecond is past on the database's clock
    audit = faults.table(h, "security_audit_events")
    delete = f"DELETE FROM {audit} WHERE subject_id = '{subject_id}'"
    if h.dialect == "postgres":
        database = str(await h.scalar("SELECT current_database()"))
        conn = await asyncpg.connect(stores.pruner_url(database), timeout=5)
        try:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO qinglong.audit_prune_permits (cutoff_ms) VALUES "
                    "((extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1)"
                )
                await conn.execute(delete)
                await conn.execute("DELETE FROM qinglong.audit_prune_permits")
        except asyncpg.PostgresError as exc:
            refused: BaseException = exc
            return refused
        finally:
            await conn.close()
        return None
    path = str((await h.raw("PRAGMA database_list"))[0]["file"])
    conn_file = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        conn_file.execute("BEGIN IMMEDIATE")
        try:
            conn_file.execute(
                "INSERT INTO audit_prune_permits (cutoff_ms) VALUES "
                "(CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) - 1)"
            )
            conn_file.execute(delete)
            conn_file.execute("DELETE FROM audit_prune_permits")
        except sqlite3.DatabaseError as exc:
            conn_file.execute("ROLLBACK")
            return exc
        conn_file.execute("COMMIT")
        return None
    finally:
        conn_file.close()


async def _audit(h: stores.Harness, subjects: Sequence[str] = ()) -> list[dict[str, Any]]:
    where = "1 = 1"
    if subjects:
        where = "subject_id IN (" + ", ".join(f"'{s}'" for s in subjects) + ")"
    table = faults.table(h, "security_audit_events")
    return await h.raw(f"SELECT * FROM {table} WHERE {where} ORDER BY event_id")


@pytest.mark.parametrize("live", ["pending", "approved", "consumed_waiting", "dispatch_waiting"])
async def test_the_pruner_cannot_delete_the_audit_of_a_live_subject(
    harness: stores.Harness, now: ManualClock, live: str
) -> None:
    subjects = await _subjects(harness, now)
    before = await _audit(harness)
    assert await _audit(harness, [subjects[live]])

    refused = await _prune_by_hand(harness, subjects[live])

    if harness.dialect == "postgres":
        assert isinstance(refused, asyncpg.PostgresError)
        assert (refused.sqlstate, str(refused)) == ("23001", LIVE_SUBJECT)
    else:
        assert isinstance(refused, sqlite3.IntegrityError)
        assert str(refused) == LIVE_SUBJECT
    assert await _audit(harness) == before
    assert not await harness.raw(f"SELECT * FROM {faults.table(harness, 'audit_prune_permits')}")


async def test_the_same_prune_of_a_finished_subject_passes(
    harness: stores.Harness, now: ManualClock
) -> None:
    subjects = await _subjects(harness, now)
    rejected = subjects["rejected"]
    assert len(await _audit(harness, [rejected])) == 2  # created, rejected

    assert await _prune_by_hand(harness, rejected) is None

    assert await _audit(harness, [rejected]) == []
