"""A policy's lifetime and reminders against plain logins (PostgreSQL).

The database sets the life of a request under a policy with a lifetime, whatever its writer
asks; only the runtime writes a request's `approval.expiring` event, once, when the database's
clock says it is due; nobody changes or deletes one. Each attack runs as a login holding only
its documented role and asserts the database's SQLSTATE and that nothing changed.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors
from tests.support import refusals, stores
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

THIRTY_DAYS_MS = 30 * 86_400_000
_POLICY = (
    "INSERT INTO qinglong.approval_policies (name, version, action_type, approvals_required, "
    "lifetime_ms, remind_before_ms) VALUES ('{name}', 1, 'run.create', 1, {life}, {remind})"
)
_EVENT = (
    "INSERT INTO qinglong.approval_events (kind, approval_request_id) "
    "VALUES ('approval.expiring', $1)"
)


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _database(pg: stores.Harness) -> str:
    return str(await pg.scalar("SELECT current_database()"))


async def _requested(pg: stores.Harness, now: ManualClock, ref: str) -> str:
    """A request whose writer asks for thirty days."""
    long = api.Api(
        pg.approver_store, now, api.Policy(approval_ttl_ms=THIRTY_DAYS_MS, max_attempts=5)
    )
    created = await long.create_approval("run.create", _plan(ref), requested_by="alice")
    return created.approval_request_id


async def _snapshot(pg: stores.Harness, request: str) -> tuple[Any, ...]:
    where = f"WHERE approval_request_id = '{request}'"
    return (
        [dict(r) for r in await pg.raw(f"SELECT * FROM qinglong.approval_requests {where}")],
        [dict(r) for r in await pg.raw(f"SELECT * FROM qinglong.approval_events {where}")],
    )


async def test_a_request_under_a_policy_lives_its_lifetime_whatever_its_writer_asks(
    pg: stores.Harness, now: ManualClock
) -> None:
    await pg.raw(_POLICY.format(name="minute", life=60_000, remind="NULL"))
    # Through the product: the store asks for thirty days.
    request = await _requested(pg, now, "act-store")
    row = (await _snapshot(pg, request))[0][0]
    assert row["expires_at_ms"] - row["created_at_ms"] == 60_000
    db_now = int(await pg.scalar("SELECT qinglong.db_now_ms()"))
    assert db_now < row["db_expires_at_ms"] <= db_now + 60_000
    # By hand, as a plain approver login: its own plan, a request for thirty days.
    conn = await asyncpg.connect(stores.approver_url(await _database(pg)), timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, "
                "plan_json, plan_digest, created_at_ms) "
                "VALUES ('proj-1', 'act-raw', 'run.create', '{}', repeat('a', 64), $1)",
                now.ms,
            )
            await conn.execute(
                "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, "
                "action_type, action_ref, action_digest, status, version, requested_by, "
                "requested_principal, expires_at_ms, created_at_ms, updated_at_ms, "
                "db_expires_at_ms) VALUES ('a-raw', 'proj-1', 'run.create', 'act-raw', "
                "repeat('a', 64), 'pending', 1, 'mallory', session_user, $1, $2, $2, $1)",
                now.ms + THIRTY_DAYS_MS,
                now.ms,
            )
    finally:
        await conn.close()
    raw = (await _snapshot(pg, "a-raw"))[0][0]
    assert raw["expires_at_ms"] - raw["created_at_ms"] == 60_000
    db_now = int(await pg.scalar("SELECT qinglong.db_now_ms()"))
    assert db_now < raw["db_expires_at_ms"] <= db_now + 60_000
    copy = await pg.raw(
        "SELECT lifetime_ms FROM qinglong.approval_request_policies "
        "WHERE approval_request_id = 'a-raw'"
    )
    assert [c["lifetime_ms"] for c in copy] == [60_000]


async def test_only_the_runtime_writes_a_reminder_and_only_when_it_is_due(
    pg: stores.Harness, now: ManualClock
) -> None:
    await pg.raw(_POLICY.format(name="minute", life=60_000, remind=30_000))
    request = await _requested(pg, now, "act-early")
    database = await _database(pg)
    before = await _snapshot(pg, request)
    for login, refused in (
        (stores.approver_url(database), "42501"),
        (stores.strict_approver_url(database), "42501"),
        (stores.operator_url(database), "42501"),
        (stores.pruner_url(database), "42501"),
        # The runtime may write one, not before its time (thirty seconds before expiry).
        (stores.runtime_url(database), "QLA03"),
    ):
        assert await refusals.sqlstate_as(login, _EVENT, request) == refused, login
        assert await _snapshot(pg, request) == before
    assert await pg.store.remind_approvals() == []
    # Nothing due: a pass by another login writes nothing and needs no right to.
    assert await pg.approver_store.remind_approvals() == []
    assert await _snapshot(pg, request) == before


async def test_a_reminder_is_written_once_and_never_changed_or_deleted(
    pg: stores.Harness, now: ManualClock
) -> None:
    await pg.raw(_POLICY.format(name="short", life=2_000, remind=1_500))
    request = await _requested(pg, now, "act-due")
    await anyio.sleep(0.6)
    # The product's own sweep as an approver's login: refused, nothing written.
    with pytest.raises(errors.StoreError) as refused:
        await pg.approver_store.remind_approvals()
    assert refused.value.code == "permission_denied"
    assert (await _snapshot(pg, request))[1] == []
    assert await pg.store.remind_approvals() == [request]
    before = await _snapshot(pg, request)
    [event] = before[1]
    assert event["kind"] == "approval.expiring"
    database = await _database(pg)
    change = "UPDATE qinglong.approval_events SET at_ms = 0 WHERE approval_request_id = $1"
    drop = "DELETE FROM qinglong.approval_events WHERE approval_request_id = $1"
    for login in (
        stores.approver_url(database),
        stores.operator_url(database),
        stores.pruner_url(database),
        stores.runtime_url(database),
    ):
        assert await refusals.sqlstate_as(login, change, request) == "42501", login
        assert await refusals.sqlstate_as(login, drop, request) == "42501", login
        assert await _snapshot(pg, request) == before
    # A second reminder of the same request: the key refuses it, the sweep skips it.
    assert await refusals.sqlstate_as(stores.runtime_url(database), _EVENT, request) == "23505"
    assert await pg.store.remind_approvals() == []
    assert await _snapshot(pg, request) == before
