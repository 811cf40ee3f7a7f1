"""The requester's narrowing of the window, attacked from plain logins holding only their
documented roles (PostgreSQL: the approver login of docs/security.md; SQLite: a plain
connection to the file): a request's narrowing never changes once written, and a hand-written
consume cannot widen the dispatch's window past the intersection of the policy's and the
request's; nor can a request name a window that can never open."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.domain import plans, waits
from qinglong_dispatcher.usecases import approving, rejecting, requesting
from tests.support import faults, refusals, stores
from tests.support.clock import ManualClock
from tests.support.targets import MODELS, TARGET_TYPE
from tests.support.windows import SETTINGS, another_approver, window_policy

HOUR_MS = 3_600_000


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the windows."""
    return ManualClock(int(time.time() * 1000))


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


async def _refused(h: stores.Harness, sql: str) -> str:
    if h.dialect == "postgres":
        return await refusals.sqlstate_as(stores.approver_url(await _database(h)), sql)
    return await refusals.sqlite_abort(h, sql)


async def _requested(h: stores.Harness, clock: ManualClock, narrowing: waits.Narrowing) -> str:
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1", "router": None},
        models=MODELS,
    )
    created = await requesting.request_approval(
        h.approver_store, clock, SETTINGS, plan, requested_by="tester", narrowing=narrowing
    )
    return created.approval_request_id


async def _rows(h: stores.Harness) -> list[tuple[Any, ...]]:
    requests = await h.raw(
        f"SELECT approval_request_id, status, not_before_ms, window_for_ms "
        f"FROM {faults.table(h, 'approval_requests')} ORDER BY approval_request_id"
    )
    dispatches = await h.raw(
        f"SELECT dispatch_id, not_before_ms, not_after_ms "
        f"FROM {faults.table(h, 'approved_action_dispatches')} ORDER BY dispatch_id"
    )
    return [tuple(r.values()) for r in requests] + [tuple(r.values()) for r in dispatches]


async def test_a_requests_narrowing_never_changes(
    harness: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(
        harness, now, waits.Narrowing(not_before_ms=now.ms + HOUR_MS, window_for_ms=HOUR_MS)
    )
    before = await _rows(harness)
    requests = faults.table(harness, "approval_requests")
    where = f"WHERE approval_request_id = '{request}'"
    principal = "session_user" if harness.dialect == "postgres" else "'sam'"
    # The approver's own approve, which the approval rules admit, widening on the way.
    approve = (
        f"UPDATE {requests} SET status = 'approved', version = 2, decided_by = 'bob', "
        f"decided_principal = {principal}, updated_at_ms = {now.ms}"
    )
    for change in ("window_for_ms = NULL", "not_before_ms = 1", "window_for_ms = 2592000000"):
        refusal = await _refused(harness, f"{approve}, {change} {where}")
        expected = {
            "postgres": "QLI01",
            "sqlite": "qinglong:window_refused: a request's window never changes",
        }
        assert refusal == expected[harness.dialect]
    assert await _rows(harness) == before
    # The same approve keeping the window is admitted: the window alone was refused.
    if harness.dialect == "postgres":
        await stores.as_login(stores.approver_url(await _database(harness)), f"{approve} {where}")
    else:
        await harness.raw(f"{approve} {where}")
    after = await _rows(harness)
    assert [r[1] for r in after] == ["approved"]
    assert [r[2:] for r in after] == [r[2:] for r in before]


async def test_a_request_cannot_name_a_window_that_never_opens(
    harness: stores.Harness, now: ManualClock
) -> None:
    """A login writing the request by hand, past the application's check."""
    await window_policy(harness, delay_ms=2 * HOUR_MS)
    request = await _requested(harness, now, waits.Narrowing(window_for_ms=3 * HOUR_MS))
    # Ended, so that a copy of it is the plan's one live request again.
    await rejecting.reject(harness.approver_store, now, request, decided_by="tester")
    before = await _rows(harness)
    requests = faults.table(harness, "approval_requests")
    principal = "session_user" if harness.dialect == "postgres" else "requested_principal"
    db_expires = "" if harness.dialect == "postgres" else ", db_expires_at_ms"
    copy = (
        f"INSERT INTO {requests} (approval_request_id, project_id, action_type, action_ref, "
        "action_digest, status, version, requested_by, requested_principal, expires_at_ms, "
        f"created_at_ms, updated_at_ms{db_expires}, not_before_ms, window_for_ms) "
        f"SELECT 'a-forged', project_id, action_type, action_ref, action_digest, 'pending', 1, "
        f"requested_by, {principal}, expires_at_ms, created_at_ms, updated_at_ms{db_expires}, "
        f"%s FROM {requests} WHERE approval_request_id = '{request}'"
    )
    # Ended an hour ago; and one hour from now, before the policy's two hours of delay.
    for narrowing, why in (
        (f"{now.ms - 2 * HOUR_MS}, {HOUR_MS}", "it can start"),
        (f"NULL, {HOUR_MS}", "the policy lets it start"),
    ):
        refusal = await _refused(harness, copy % narrowing)
        expected = {
            "postgres": "QLW02",
            "sqlite": f"qinglong:window_empty: the requested window ends before {why}",
        }
        assert refusal == expected[harness.dialect]
    assert await _rows(harness) == before


def _forged_consume(h: stores.Harness, approval_request_id: str, now_ms: int) -> list[str]:
    """The approver's consume written by hand, naming the widest window of all."""
    requests = faults.table(h, "approval_requests")
    principal = "session_user" if h.dialect == "postgres" else "'mallory'"
    return [
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
        f"consumed_principal = {principal}, updated_at_ms = {now_ms} "
        f"WHERE approval_request_id = '{approval_request_id}'",
        f"INSERT INTO {faults.table(h, 'approved_action_dispatches')} (dispatch_id, "
        "approval_request_id, project_id, action_type, action_ref, action_digest, approved_by, "
        f"created_at_ms, not_before_ms, not_after_ms) SELECT 'd-forged', approval_request_id, "
        f"project_id, action_type, action_ref, action_digest, decided_by, {now_ms}, NULL, NULL "
        f"FROM {requests} WHERE approval_request_id = '{approval_request_id}'",
    ]


async def test_a_hand_written_consume_cannot_widen_the_window(
    harness: stores.Harness, now: ManualClock
) -> None:
    """PostgreSQL: the recorder's definer overwrites the forged window with the intersection.
    SQLite: the trigger refuses the insert, and nothing is written."""
    await window_policy(harness, window_ms=2 * HOUR_MS)
    start = now.ms + HOUR_MS
    request = await _requested(
        harness, now, waits.Narrowing(not_before_ms=start, window_for_ms=30 * 86_400_000)
    )
    other = await another_approver(harness)
    try:
        await approving.approve(other, now, request, decided_by="approver")
    finally:
        await other.close()
    update, insert = _forged_consume(harness, request, now.ms)
    dispatches = faults.table(harness, "approved_action_dispatches")
    if harness.dialect == "postgres":
        connection = await asyncpg.connect(stores.approver_url(await _database(harness)), timeout=5)
        try:
            async with connection.transaction():
                await connection.execute(update)
                await connection.execute(insert)
        finally:
            await connection.close()
        (row,) = await harness.raw(
            f"SELECT not_before_ms, not_after_ms FROM {dispatches} WHERE dispatch_id = 'd-forged'"
        )
        # The requester's start, the policy's end (two hours from the consume): neither open.
        assert row["not_before_ms"] == start
        assert start < row["not_after_ms"] <= now.ms + 2 * HOUR_MS + 60_000
        return
    await harness.raw(update)
    refusal = await refusals.sqlite_abort(harness, insert)
    assert refusal == "qinglong:window_refused: a dispatch carries its policy's window"
    assert await harness.raw(f"SELECT * FROM {dispatches} WHERE dispatch_id = 'd-forged'") == []
