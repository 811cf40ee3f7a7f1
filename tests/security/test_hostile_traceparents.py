"""A request's trace, attacked from plain logins holding only their documented roles
(PostgreSQL: the approver and runtime logins of docs/security.md; SQLite: a plain connection
to the file): a traceparent is one W3C form or nothing, a request's never changes, and a
dispatch's is its request's whatever a hand-written consume names."""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.usecases import requesting
from tests.support import faults, refusals, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def now() -> ManualClock:
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> Any:
    return api.run_create_plan({"projectId": "p1", "taskId": ref, "taskRevision": 1})


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


async def _refused(h: stores.Harness, url_of: Any, sql: str) -> str:
    if h.dialect == "postgres":
        return await refusals.sqlstate_as(url_of(await _database(h)), sql)
    return await refusals.sqlite_abort(h, sql)


async def _traceparents(h: stores.Harness) -> list[tuple[Any, ...]]:
    requests = await h.raw(
        f"SELECT approval_request_id, traceparent FROM {faults.table(h, 'approval_requests')} "
        "ORDER BY approval_request_id"
    )
    dispatches = await h.raw(
        f"SELECT dispatch_id, traceparent FROM "
        f"{faults.table(h, 'approved_action_dispatches')} ORDER BY dispatch_id"
    )
    return [(r["approval_request_id"], r["traceparent"]) for r in requests] + [
        (r["dispatch_id"], r["traceparent"]) for r in dispatches
    ]


async def test_the_database_copies_the_requests_traceparent_into_its_dispatch(
    harness: stores.Harness, now: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, now)
    (traced,) = await the_api.submit(
        [_plan("t1")], requested_by="sam", approved_by="sam", traceparent=GIVEN
    )
    (plain,) = await the_api.submit([_plan("t2")], requested_by="sam", approved_by="sam")
    shown = dict(await _traceparents(harness))
    assert shown[traced.approval_request_id] == shown[traced.dispatch_id] == GIVEN
    assert shown[plain.approval_request_id] is None
    assert shown[plain.dispatch_id] is None
    claimed = await harness.store.claim_due(now_ms=now.ms + 1, owner="w1", limit=8, lease_ms=30_000)
    by_id = {c.dispatch_id: c.dispatch for c in claimed.claims}
    assert by_id[traced.dispatch_id] is not None
    assert by_id[traced.dispatch_id].traceparent == GIVEN  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "bad",
    [
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # not the stored version
        GIVEN + "-x" * 200,  # long, carrying anything
    ],
)
async def test_a_traceparent_is_one_w3c_form_whoever_writes_it(
    harness: stores.Harness, now: ManualClock, bad: str
) -> None:
    """The store's own insert with a value the domain would refuse (a caller that skipped
    the check): the database's check refuses it, and nothing is written."""
    new = requesting.new_approval(
        _plan("bad"),
        requested_by="sam",
        now_ms=now.ms,
        approval_ttl_ms=600_000,
        plan_digests=harness.approver_store.plan_digests,
        traceparent=bad,
    )
    before = await _traceparents(harness)
    with pytest.raises(errors.QinglongError):
        await harness.approver_store.create_approval(new, now_ms=now.ms)
    assert await _traceparents(harness) == before


async def test_a_requests_traceparent_never_changes(
    harness: stores.Harness, now: ManualClock
) -> None:
    request = await requesting.request_approval(
        harness.approver_store,
        now,
        api.Policy(approval_ttl_ms=600_000, max_attempts=5),
        _plan("t1"),
        requested_by="sam",
        traceparent=GIVEN,
    )
    before = await _traceparents(harness)
    requests = faults.table(harness, "approval_requests")
    where = f"WHERE approval_request_id = '{request.approval_request_id}'"
    principal = "session_user" if harness.dialect == "postgres" else "'sam'"
    # The approver's own approve, which the approval rules admit, changing the trace on the way.
    approve = (
        f"UPDATE {requests} SET status = 'approved', version = 2, decided_by = 'bob', "
        f"decided_principal = {principal}, updated_at_ms = {now.ms}, traceparent = "
    )
    for value in (f"'{OTHER}'", "NULL"):
        refusal = await _refused(harness, stores.approver_url, f"{approve}{value} {where}")
        expected = {
            "postgres": "QLI01",
            "sqlite": "qinglong:traceparent_refused: a request's traceparent never changes",
        }
        assert refusal == expected[harness.dialect]
    assert await _traceparents(harness) == before
    # The same approve keeping the trace is admitted: the trace alone was refused.
    admitted = f"{approve}traceparent {where}"
    if harness.dialect == "postgres":
        await stores.as_login(stores.approver_url(await _database(harness)), admitted)
    else:
        await harness.raw(admitted)
    status = await harness.raw(f"SELECT status FROM {requests} {where}")
    assert [r["status"] for r in status] == ["approved"]
    assert await _traceparents(harness) == before


async def test_a_dispatchs_traceparent_never_changes(
    harness: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await make_api(harness.approver_store, now).submit(
        [_plan("t1")], requested_by="sam", approved_by="sam", traceparent=GIVEN
    )
    before = await _traceparents(harness)
    sql = (
        f"UPDATE {faults.table(harness, 'approved_action_dispatches')} "
        f"SET traceparent = '{OTHER}' WHERE dispatch_id = '{consumed.dispatch_id}'"
    )
    refusal = await _refused(harness, stores.runtime_url, sql)
    expected = {"postgres": "42501", "sqlite": "approved_action_dispatches is immutable"}
    assert refusal == expected[harness.dialect]
    assert await _traceparents(harness) == before


def _forged_consume(h: stores.Harness, approval_request_id: str, now_ms: int) -> list[str]:
    """The approver's consume written by hand, naming a traceparent of its own choosing."""
    requests = faults.table(h, "approval_requests")
    principal = "session_user" if h.dialect == "postgres" else "'mallory'"
    return [
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
        f"consumed_principal = {principal}, updated_at_ms = {now_ms} "
        f"WHERE approval_request_id = '{approval_request_id}'",
        f"INSERT INTO {faults.table(h, 'approved_action_dispatches')} (dispatch_id, "
        "approval_request_id, project_id, action_type, action_ref, action_digest, approved_by, "
        f"created_at_ms, traceparent) SELECT 'd-forged', approval_request_id, project_id, "
        f"action_type, action_ref, action_digest, decided_by, {now_ms}, '{OTHER}' "
        f"FROM {requests} WHERE approval_request_id = '{approval_request_id}'",
    ]


async def test_a_hand_written_consume_cannot_choose_the_dispatchs_traceparent(
    harness: stores.Harness, now: ManualClock
) -> None:
    """PostgreSQL: the recorder's definer trigger overwrites the forged value with the
    request's. SQLite: the trigger refuses the insert, and nothing is written."""
    request = await requesting.request_approval(
        harness.approver_store,
        now,
        api.Policy(approval_ttl_ms=600_000, max_attempts=5),
        _plan("t1"),
        requested_by="sam",
        traceparent=GIVEN,
    )
    await make_api(harness.approver_store, now).approve(
        request.approval_request_id, decided_by="bob"
    )
    update, insert = _forged_consume(harness, request.approval_request_id, now.ms)
    dispatches = faults.table(harness, "approved_action_dispatches")
    if harness.dialect == "postgres":
        connection = await asyncpg.connect(stores.approver_url(await _database(harness)), timeout=5)
        try:
            async with connection.transaction():
                await connection.execute(update)
                await connection.execute(insert)
        finally:
            await connection.close()
        rows = await harness.raw(
            f"SELECT traceparent FROM {dispatches} WHERE dispatch_id = 'd-forged'"
        )
        assert [r["traceparent"] for r in rows] == [GIVEN]
        return
    await harness.raw(update)
    refusal = await refusals.sqlite_abort(harness, insert)
    assert refusal == "qinglong:traceparent_refused: a dispatch names its request's traceparent"
    assert await harness.raw(f"SELECT * FROM {dispatches} WHERE dispatch_id = 'd-forged'") == []
