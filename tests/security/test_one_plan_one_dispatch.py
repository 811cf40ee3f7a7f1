"""One plan, one dispatch (migration live_requests): a second request for a plan whose request
is pending, approved or consumed is refused by the database, whoever writes it, and so is a
second dispatch. The attacks run as a plain login holding only the documented role (PostgreSQL:
a login granted `qinglong_submitter`; SQLite: a plain connection to the file) and assert the
database's own refusal and that nothing changed."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, errors
from tests.support import faults, stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

SUBMITTER_LOGIN = stores.session_login("plan_submitter")
"""A login granted only `qinglong_submitter` (docs/security.md: the API's submit role)."""


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database checks a request's lifetime on its own clock."""
    return ManualClock(int(time.time() * 1000))


@pytest.fixture
async def h(harness: stores.Harness) -> stores.Harness:
    """Either dialect's store; on PostgreSQL with the submitter login made (dropped with the
    session's logins)."""
    if harness.dialect == "postgres":
        await stores.create_login(SUBMITTER_LOGIN, "qinglong_submitter")
    return harness


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


def _copy_sql(h: stores.Harness, source: approvals.Approval, new_id: str, now_ms: int) -> str:
    """The attacker's INSERT: `source`'s plan and digest under a new id, pending at v1."""
    principal, db_expiry = "session_user", "NULL"  # PostgreSQL's trigger sets the expiry
    if h.dialect == "sqlite":  # the file's writer computes it as the store does
        principal = "'mallory'"
        db_expiry = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + 600000"
    return (
        f"INSERT INTO {faults.table(h, 'approval_requests')} (approval_request_id, project_id, "
        "action_type, action_ref, action_digest, status, version, requested_by, "
        "requested_principal, expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) "
        f"VALUES ('{new_id}', '{source.project_id}', '{source.action_type}', "
        f"'{source.action_ref}', '{source.action_digest}', 'pending', 1, 'mallory', "
        f"{principal}, {now_ms + 600_000}, {now_ms}, {now_ms}, {db_expiry})"
    )


async def _as_submitter(h: stores.Harness, sql: str) -> None:
    """Run `sql` as the documented role; the driver's error reaches the caller."""
    if h.dialect == "postgres":
        await stores.as_login(stores.pg_url(await _database(h), login=SUBMITTER_LOGIN), sql)
    else:
        await h.raw(sql)


async def _refusal(h: stores.Harness, sql: str) -> str:
    """The database's refusal of `sql` run as the documented role: SQLSTATE, or message."""
    if h.dialect == "postgres":
        with pytest.raises(asyncpg.PostgresError) as pg_caught:
            await _as_submitter(h, sql)
        return str(pg_caught.value.sqlstate)
    with pytest.raises(sqlite3.IntegrityError) as caught:
        await _as_submitter(h, sql)
    return str(caught.value)


UNIQUE_REQUEST = {
    "postgres": "23505",
    "sqlite": "UNIQUE constraint failed: approval_requests.project_id, "
    "approval_requests.action_ref",
}
UNIQUE_DISPATCH = {
    "postgres": "23505",
    "sqlite": "UNIQUE constraint failed: approved_action_dispatches.project_id, "
    "approved_action_dispatches.action_ref",
}


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    """Everything a second request or dispatch would add to."""
    tables = (
        "approval_requests",
        "approved_action_dispatches",
        "approved_action_dispatch_executions",
        "security_audit_events",
    )
    return tuple([await h.raw(f"SELECT * FROM {faults.table(h, n)} ORDER BY 1") for n in tables])


def _plan(action_ref: str) -> dict[str, Any]:
    fields = {"projectId": "p", "taskId": "t", "taskRevision": 1, "actionRef": action_ref}
    return api.run_create_plan(fields).to_canonical_dict()


async def _request(h: stores.Harness, approval_request_id: str) -> approvals.Approval:
    got = await h.approver_store.get_approval(approval_request_id)
    assert got is not None
    return got


async def test_a_copy_of_a_consumed_request_is_refused(h: stores.Harness, now: ManualClock) -> None:
    (consumed,) = await submit_runs(h.approver_store, now, 1)
    report = await make_dispatcher(h.store, now).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    source = await _request(h, consumed.approval_request_id)
    before = await _snapshot(h)

    refusal = await _refusal(h, _copy_sql(h, source, "a-copy", now.ms))

    assert refusal == UNIQUE_REQUEST[h.dialect]
    assert await _snapshot(h) == before


@pytest.mark.parametrize("approve", [False, True])
async def test_a_second_request_beside_a_live_one_is_refused(
    h: stores.Harness, now: ManualClock, approve: bool
) -> None:
    the_api = make_api(h.approver_store, now)
    created = await the_api.create_approval(
        "run.create",
        _plan("act-live"),
        requested_by="alice",
    )
    source = created
    if approve:
        source = await the_api.approve(created.approval_request_id, decided_by="bob")
    before = await _snapshot(h)

    refusal = await _refusal(h, _copy_sql(h, source, "a-second", now.ms))

    assert refusal == UNIQUE_REQUEST[h.dialect]
    assert await _snapshot(h) == before


async def test_after_a_rejection_the_plan_may_have_one_new_request_and_one_dispatch(
    h: stores.Harness, now: ManualClock
) -> None:
    the_api = make_api(h.approver_store, now)
    created = await the_api.create_approval(
        "run.create",
        _plan("act-again"),
        requested_by="alice",
    )
    rejected = await the_api.reject(created.approval_request_id, decided_by="bob")

    await _as_submitter(h, _copy_sql(h, rejected, "a-again", now.ms))
    # The new one is the plan's live request now: a third is refused.
    assert await _refusal(h, _copy_sql(h, rejected, "a-third", now.ms)) == UNIQUE_REQUEST[h.dialect]
    await the_api.approve("a-again", decided_by="bob")
    consumed = await the_api.consume("a-again")

    dispatches = await h.raw(
        f"SELECT dispatch_id FROM {faults.table(h, 'approved_action_dispatches')} "
        "WHERE action_ref = 'act-again'"
    )
    assert [row["dispatch_id"] for row in dispatches] == [consumed.dispatch_id]


async def test_a_second_dispatch_of_a_plan_is_refused_without_the_request_rule(
    h: stores.Harness, now: ManualClock
) -> None:
    # The second layer alone: with the request rule gone (an administrator dropped it), a copy
    # is admitted and approved, and consuming it still cannot write a second dispatch.
    (consumed,) = await submit_runs(h.approver_store, now, 1)
    source = await _request(h, consumed.approval_request_id)
    await h.raw(f"DROP INDEX {faults.table(h, 'approval_requests_one_live_per_plan')}")
    await _as_submitter(h, _copy_sql(h, source, "a-copy", now.ms))
    await make_api(h.approver_store, now).approve("a-copy", decided_by="bob")
    before = await _snapshot(h)

    with pytest.raises(errors.StoreError) as refused:
        await make_api(h.approver_store, now).consume("a-copy")

    assert refused.value.code == "constraint_violation"
    assert await _snapshot(h) == before
    refusal = await _consume_in_sql(h, "a-copy", now.ms)
    assert refusal == UNIQUE_DISPATCH[h.dialect]
    assert await _snapshot(h) == before


async def _consume_in_sql(h: stores.Harness, approval_request_id: str, now_ms: int) -> str:
    """The approver's consume written by hand, in one transaction: the database's refusal."""
    requests = faults.table(h, "approval_requests")
    dispatches = faults.table(h, "approved_action_dispatches")
    principal = "session_user" if h.dialect == "postgres" else "'approver'"
    consume = (
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
        f"consumed_principal = {principal}, updated_at_ms = {now_ms} "
        f"WHERE approval_request_id = '{approval_request_id}'"
    )
    dispatch = (
        f"INSERT INTO {dispatches} (dispatch_id, approval_request_id, project_id, action_type, "
        "action_ref, action_digest, approved_by, created_at_ms) SELECT 'd-second', "
        "approval_request_id, project_id, action_type, action_ref, action_digest, decided_by, "
        f"{now_ms} FROM {requests} WHERE approval_request_id = '{approval_request_id}'"
    )
    if h.dialect == "postgres":
        conn = await asyncpg.connect(stores.approver_url(await _database(h)), timeout=5)
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(consume)
            with pytest.raises(asyncpg.PostgresError) as pg_caught:
                await conn.execute(dispatch)
            return str(pg_caught.value.sqlstate)
        finally:
            await transaction.rollback()
            await conn.close()
    path = str((await h.raw("PRAGMA database_list"))[0]["file"])
    file = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        file.execute("BEGIN IMMEDIATE")
        file.execute(consume)
        with pytest.raises(sqlite3.IntegrityError) as caught:
            file.execute(dispatch)
        return str(caught.value)
    finally:
        file.execute("ROLLBACK")
        file.close()


@pytest.mark.postgres
async def test_a_create_racing_another_for_its_plan_gets_the_typed_conflict(
    pg: stores.Harness, now: ManualClock
) -> None:
    # Another writer holds the plan's key uncommitted: the create's read does not see it, its
    # insert waits, and when the other commits the unique key refuses it. The store names the
    # plan as the read would have (409 `approval_state_conflict` over HTTP).
    data = _plan("act-race")
    other = await asyncpg.connect(stores.approver_url(await _database(pg)), timeout=5)
    try:
        transaction = other.transaction()
        await transaction.start()
        await other.execute(
            "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
            "plan_digest, created_at_ms) VALUES ('p', 'act-race', 'run.create', '{}', $1, 1)",
            "a" * 64,
        )
        create = asyncio.create_task(
            make_api(pg.approver_store, now).create_approval(
                "run.create", data, requested_by="alice"
            )
        )
        while not await pg.raw(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ):
            assert not create.done(), create
            await asyncio.sleep(0.01)
        await transaction.commit()
        with pytest.raises(errors.ApprovalStateConflict) as refused:
            await create
    finally:
        await other.close()
    assert str(refused.value) == "action act-race already has a plan in project p"
    assert await pg.scalar("SELECT count(*) FROM qinglong.approval_requests") == 0
