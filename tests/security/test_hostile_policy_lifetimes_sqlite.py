"""A policy's lifetime and reminders on an edge file, by a plain `sqlite3` connection.

As on PostgreSQL (tests/security/test_hostile_policy_lifetimes.py): a request under a policy
with a lifetime lives exactly that long on the file's clock, and its one `approval.expiring`
event is written only when that clock says it is due, at the file's time, never changed and
never deleted while its request exists. Each test asserts the trigger's own abort and that
nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from qinglong_dispatcher import api
from tests.support import refusals, stores
from tests.support.clock import ManualClock

THIRTY_DAYS_MS = 30 * 86_400_000
_POLICY = (
    "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
    "lifetime_ms, remind_before_ms, written_by) "
    "VALUES ('{name}', 1, 'run.create', 1, {life}, {remind}, 'owner')"
)
_DB_NOW = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the file's clock must see these lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _requested(h: stores.Harness, now: ManualClock, ref: str) -> str:
    """A request whose writer asks for thirty days."""
    long = api.Api(
        h.approver_store, now, api.Policy(approval_ttl_ms=THIRTY_DAYS_MS, max_attempts=5)
    )
    created = await long.create_approval("run.create", _plan(ref), requested_by="req")
    return created.approval_request_id


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    return (
        await h.raw("SELECT * FROM approval_requests ORDER BY approval_request_id"),
        await h.raw("SELECT * FROM approval_events ORDER BY id"),
        await h.raw("SELECT * FROM security_audit_events ORDER BY event_id"),
    )


async def test_a_request_under_a_policy_lives_its_lifetime_and_no_other(
    edge: stores.Harness, now: ManualClock
) -> None:
    await edge.raw(_POLICY.format(name="minute", life=60_000, remind="NULL"))
    request = await _requested(edge, now, "act-store")
    [row] = await edge.raw(
        f"SELECT *, {_DB_NOW} AS db_now FROM approval_requests "
        f"WHERE approval_request_id = '{request}'"
    )
    assert row["expires_at_ms"] - row["created_at_ms"] == 60_000
    assert row["db_now"] < row["db_expires_at_ms"] <= row["db_now"] + 60_000
    before = await _snapshot(edge)
    await edge.raw(
        "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest, "
        f"created_at_ms) VALUES ('proj-1', 'act-raw', 'run.create', '{{}}', "
        f"'{'a' * 64}', {now.ms})"
    )
    plans = await edge.raw("SELECT * FROM action_plans ORDER BY action_ref")
    longer = (
        "INSERT INTO approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) VALUES ('a-raw', "
        f"'proj-1', 'run.create', 'act-raw', '{'a' * 64}', 'pending', 1, 'mallory', 'mallory', "
        f"{now.ms + THIRTY_DAYS_MS}, {now.ms}, {now.ms}, {_DB_NOW} + {{life}})"
    )
    for life in (THIRTY_DAYS_MS, 60_000):
        # Thirty days: refused. A minute counted from the file's clock, with the caller's
        # expiry thirty days out: refused too (the request's two expiries are one lifetime).
        refused = await refusals.sqlite_abort(edge, longer.format(life=life))
        assert "a request under a policy lives its lifetime" in refused
        assert await _snapshot(edge) == before
        assert await edge.raw("SELECT * FROM action_plans ORDER BY action_ref") == plans


async def test_a_reminder_is_written_when_due_once_at_the_files_time_and_never_changed(
    edge: stores.Harness, now: ManualClock
) -> None:
    await edge.raw(_POLICY.format(name="short", life=2_000, remind=1_500))
    request = await _requested(edge, now, "act-due")
    event = (
        "INSERT INTO approval_events (kind, approval_request_id{at}) "
        f"VALUES ('approval.expiring', '{request}'{{value}})"
    )
    early = await refusals.sqlite_abort(edge, event.format(at="", value=""))
    assert "a reminder is due once, before expiry" in early
    assert (await edge.raw("SELECT count(*) AS n FROM approval_events"))[0]["n"] == 0
    await anyio.sleep(0.6)
    before = await _snapshot(edge)
    forged = await refusals.sqlite_abort(edge, event.format(at=", at_ms", value=", 1"))
    assert "at the database's time" in forged
    assert await _snapshot(edge) == before
    assert await edge.store.remind_approvals() == [request]
    written = await _snapshot(edge)
    [row] = written[1]
    assert row["kind"] == "approval.expiring"
    for attack, said in (
        (event.format(at="", value=""), "UNIQUE constraint failed"),
        ("UPDATE approval_events SET at_ms = 0", "an event never changes"),
        ("DELETE FROM approval_events", "an event goes only with its request"),
    ):
        assert said in await refusals.sqlite_abort(edge, attack)
        assert await _snapshot(edge) == written
    assert await edge.store.remind_approvals() == []
    assert await _snapshot(edge) == written
