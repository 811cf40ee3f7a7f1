"""A decision's comment, attacked from plain logins holding only their documented roles
(PostgreSQL: the approver login of docs/security.md; SQLite: a plain connection to the file):
it is written with the move from `pending` to `approved` or `rejected` and never after, never
on a new request, and is one printable line of at most 500 characters."""

from __future__ import annotations

import time
from typing import Any

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals
from qinglong_dispatcher.usecases import approving, rejecting, requesting
from tests.support import faults, refusals, stores
from tests.support.clock import ManualClock

SQLITE_REFUSAL = (
    "qinglong:comment_refused: a decision's comment is written with the decision, never after"
)


@pytest.fixture
def now() -> ManualClock:
    return ManualClock(int(time.time() * 1000))


async def _request(h: stores.Harness, now: ManualClock, ref: str) -> approvals.Approval:
    plan = api.run_create_plan({"projectId": "p1", "taskId": ref, "taskRevision": 1})
    return await requesting.request_approval(
        h.approver_store,
        now,
        api.Policy(approval_ttl_ms=600_000, max_attempts=5),
        plan,
        requested_by="sam",
    )


async def _refused(h: stores.Harness, sql: str) -> str:
    if h.dialect == "postgres":
        database = str(await h.scalar("SELECT current_database()"))
        return await refusals.sqlstate_as(stores.approver_url(database), sql)
    return await refusals.sqlite_abort(h, sql)


async def _snapshot(h: stores.Harness) -> list[Any]:
    requests = await h.raw(
        f"SELECT approval_request_id, status, decision_comment FROM "
        f"{faults.table(h, 'approval_requests')} ORDER BY approval_request_id"
    )
    audit = await h.raw(
        f"SELECT event_id, comment FROM {faults.table(h, 'security_audit_events')} "
        "ORDER BY event_id"
    )
    return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in [*requests, *audit]]


def _principal(h: stores.Harness) -> str:
    return "session_user" if h.dialect == "postgres" else "'mallory'"


async def test_a_comment_is_never_added_nor_changed_once_decided(
    harness: stores.Harness, now: ManualClock
) -> None:
    h = harness
    approved, rejected = await _request(h, now, "t1"), await _request(h, now, "t2")
    await approving.approve(
        h.approver_store, now, approved.approval_request_id, decided_by="bob", comment="ok"
    )
    await rejecting.reject(h.approver_store, now, rejected.approval_request_id, decided_by="bob")
    before = await _snapshot(h)
    requests = faults.table(h, "approval_requests")
    expected = "QLI01" if h.dialect == "postgres" else SQLITE_REFUSAL
    # Added to a decision that had none, changed, or wiped.
    for where, value in (
        (rejected.approval_request_id, "'added later'"),
        (approved.approval_request_id, "'rewritten'"),
        (approved.approval_request_id, "NULL"),
    ):
        sql = f"UPDATE {requests} SET decision_comment = {value} "
        assert await _refused(h, f"{sql}WHERE approval_request_id = '{where}'") == expected
    # Nor rides along with the consume, a move the approval rules admit.
    consume = (
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now.ms}, "
        f"consumed_principal = {_principal(h)}, updated_at_ms = {now.ms}, "
        f"decision_comment = 'on the way out' "
        f"WHERE approval_request_id = '{approved.approval_request_id}'"
    )
    assert await _refused(h, consume) == expected
    assert await _snapshot(h) == before


async def test_a_new_request_carries_no_decisions_comment(
    harness: stores.Harness, now: ManualClock
) -> None:
    h = harness
    request = await _request(h, now, "t1")
    before = await _snapshot(h)
    requests = faults.table(h, "approval_requests")
    columns = (
        "project_id, action_type, action_ref, action_digest, status, version, requested_by, "
        "requested_principal, expires_at_ms, created_at_ms, updated_at_ms"
    )
    copy = (
        f"INSERT INTO {requests} (approval_request_id, {columns}, decision_comment) "
        f"SELECT 'a-forged', {columns}, 'decided already' FROM {requests} "
        f"WHERE approval_request_id = '{request.approval_request_id}'"
    )
    assert await _refused(h, copy) == ("QLI01" if h.dialect == "postgres" else SQLITE_REFUSAL)
    assert await _snapshot(h) == before


async def test_a_deciding_update_carries_one_printable_line_at_most(
    harness: stores.Harness, now: ManualClock
) -> None:
    """The approver's own approve, which the approval rules admit, with a comment the domain
    would refuse (a caller that skipped the check): the table's check refuses it."""
    h = harness
    request = await _request(h, now, "t1")
    before = await _snapshot(h)
    requests = faults.table(h, "approval_requests")
    newline = "chr(10)" if h.dialect == "postgres" else "char(10)"
    for bad in (f"'two' || {newline} || 'lines'", "''", f"'{'x' * 501}'"):
        sql = (
            f"UPDATE {requests} SET status = 'approved', version = 2, decided_by = 'bob', "
            f"decided_principal = {_principal(h)}, updated_at_ms = {now.ms}, "
            f"decision_comment = {bad} "
            f"WHERE approval_request_id = '{request.approval_request_id}'"
        )
        refusal = await _refused(h, sql)
        if h.dialect == "postgres":
            assert refusal == "23514"
        else:
            assert "CHECK constraint failed" in refusal
    assert await _snapshot(h) == before
