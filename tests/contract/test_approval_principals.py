"""Approvals by authenticated principals, their audit trail and `reject`, on every dialect.

The flow under test is the separated one: the runtime creates and consumes, an approver
decides. On PostgreSQL these are two logins (`session_user`); on SQLite both are the OS user.
"""

from __future__ import annotations

import sqlite3

import asyncpg
import pytest

from qinglong_dispatcher.domain import approvals, errors
from tests.contract.test_approvals import plan_bytes
from tests.support import faults, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.stores import Harness

Status = approvals.ApprovalStatus
DRIVER_REFUSALS = (sqlite3.IntegrityError, asyncpg.PostgresError)
"""What a direct SQL session sees when a trigger refuses its statement."""


def principals(h: Harness) -> tuple[str, str]:
    """(runtime, approver) as the database authenticates them."""
    if h.dialect == "postgres":
        return stores.RUNTIME_LOGIN, stores.APPROVER_LOGIN
    from qinglong_dispatcher.adapters.sqlite_file import os_user

    return os_user.os_principal(), os_user.os_principal()


async def test_each_step_stores_its_authenticated_principal_beside_the_label(
    harness: Harness, clock: ManualClock
) -> None:
    runtime, approver = principals(harness)
    created = await make_api(harness.store, clock).create_approval(
        "run.create", plan_bytes(), requested_by="alice"
    )
    assert (created.requested_by, created.requested_principal) == ("alice", runtime)
    assert (created.decided_principal, created.consumed_principal) == (None, None)
    approved = await make_api(harness.approver_store, clock).approve(
        created.approval_request_id, decided_by="bob"
    )
    assert (approved.decided_by, approved.decided_principal) == ("bob", approver)
    consumed = await make_api(harness.store, clock).consume(created.approval_request_id)
    final = await harness.store.get_approval(created.approval_request_id)
    assert final is not None
    assert (final.status, final.version) == (Status.CONSUMED, 3)
    assert (final.requested_by, final.requested_principal) == ("alice", runtime)
    assert (final.decided_by, final.decided_principal) == ("bob", approver)
    assert final.consumed_principal == runtime
    dispatch = await harness.store.get_dispatch(consumed.dispatch_id)
    assert dispatch is not None
    assert dispatch.approved_by == "bob"


async def test_every_state_change_writes_one_audit_row_on_the_database_clock(
    harness: Harness, clock: ManualClock
) -> None:
    runtime, approver = principals(harness)
    db_before = await harness.store.database_now_ms()
    created = await make_api(harness.store, clock).create_approval(
        "run.create", plan_bytes(), requested_by="alice"
    )
    await make_api(harness.approver_store, clock).approve(
        created.approval_request_id, decided_by="bob"
    )
    await make_api(harness.store, clock).consume(created.approval_request_id)
    with pytest.raises(errors.ApprovalStateConflict):  # a refused step audits nothing
        await make_api(harness.store, clock).consume(created.approval_request_id)
    db_after = await harness.store.database_now_ms()
    trail = await harness.store.audit_events(created.approval_request_id)
    assert [(e.kind, e.actor, e.principal) for e in trail] == [
        (approvals.audit_kind(Status.PENDING), "alice", runtime),
        (approvals.audit_kind(Status.APPROVED), "bob", approver),
        (approvals.audit_kind(Status.CONSUMED), runtime, runtime),
    ]
    assert [e.kind for e in trail] == ["approval.created", "approval.approved", "approval.consumed"]
    assert {e.project_id for e in trail} == {"proj-1"}
    self_approved = "by_requester" if runtime == approver else "by_other"
    assert [e.detail_code for e in trail] == ["run.create", self_approved, "run.create"]
    # The database's clock, not the caller's (the manual clock sits years in the past).
    assert all(db_before <= e.committed_at_ms <= db_after for e in trail), trail
    assert all(abs(e.committed_at_ms - clock.now_ms()) > 86_400_000 for e in trail)


async def test_reject_is_final_audited_and_never_dispatched(
    harness: Harness, clock: ManualClock
) -> None:
    runtime, approver = principals(harness)
    runtime_api = make_api(harness.store, clock)
    approver_api = make_api(harness.approver_store, clock)
    first = await runtime_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    rejected = await approver_api.reject(first.approval_request_id, decided_by="carol")
    assert (rejected.status, rejected.version) == (Status.REJECTED, 2)
    assert (rejected.decided_by, rejected.decided_principal) == ("carol", approver)
    for step in (
        approver_api.approve(first.approval_request_id, decided_by="bob"),
        approver_api.reject(first.approval_request_id, decided_by="bob"),
        runtime_api.consume(first.approval_request_id),
    ):
        with pytest.raises(errors.ApprovalStateConflict):
            await step
    # The requester may withdraw its own request, expired or not.
    second = await runtime_api.create_approval(
        "run.create", plan_bytes(actionRef="act-second"), requested_by="alice"
    )
    clock.advance(ms=86_400_000)
    withdrawn = await runtime_api.reject(second.approval_request_id, decided_by="alice")
    assert (withdrawn.status, withdrawn.decided_principal) == (Status.REJECTED, runtime)
    with pytest.raises(errors.ApprovalNotFound):
        await runtime_api.reject("a-unknown", decided_by="alice")
    with pytest.raises(errors.InvalidInput):
        await runtime_api.reject(second.approval_request_id, decided_by="not an id!")
    first_trail = await harness.store.audit_events(first.approval_request_id)
    assert [(e.kind, e.actor, e.principal) for e in first_trail] == [
        ("approval.created", "alice", runtime),
        ("approval.rejected", "carol", approver),
    ]
    assert first_trail[1].detail_code == ("by_requester" if runtime == approver else "by_other")
    second_trail = await harness.store.audit_events(second.approval_request_id)
    assert [(e.kind, e.detail_code) for e in second_trail] == [
        ("approval.created", "run.create"),
        ("approval.rejected", "by_requester"),
    ]
    dispatches = faults.table(harness, "approved_action_dispatches")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {dispatches}") == 0


async def test_direct_sql_cannot_bend_an_approval_or_dispatch_what_nobody_consumed(
    harness: Harness, clock: ManualClock
) -> None:
    """Even the administrator's raw session: the triggers hold whoever writes."""
    the_api = make_api(harness.approver_store, clock)
    pending = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    approved = await the_api.create_approval(
        "run.create", plan_bytes(actionRef="act-approved"), requested_by="alice"
    )
    await the_api.approve(approved.approval_request_id, decided_by="bob")
    consumed = await the_api.create_approval(
        "run.create", plan_bytes(actionRef="act-consumed"), requested_by="alice"
    )
    await the_api.approve(consumed.approval_request_id, decided_by="bob")
    await the_api.consume(consumed.approval_request_id)
    table = faults.table(harness, "approval_requests")

    def where(approval: approvals.Approval) -> str:
        return f"WHERE approval_request_id = '{approval.approval_request_id}'"

    for statement in (
        # pending → consumed skips the decision; approved → pending goes back.
        f"UPDATE {table} SET status = 'consumed', version = 3, consumed_at_ms = 1 {where(pending)}",
        f"UPDATE {table} SET status = 'pending', version = 1 {where(approved)}",
        # approved → expired is not a transition (the request is dead by time already).
        f"UPDATE {table} SET status = 'expired', version = 2 {where(approved)}",
        # Identity columns never change; a terminal request never changes at all.
        f"UPDATE {table} SET action_digest = '{'0' * 64}' {where(approved)}",
        f"UPDATE {table} SET expires_at_ms = expires_at_ms + 1 {where(pending)}",
        f"UPDATE {table} SET requested_by = 'mallory' {where(pending)}",
        f"UPDATE {table} SET decided_by = 'mallory' {where(consumed)}",
        f"UPDATE {table} SET status = 'approved', version = 2 {where(consumed)}",
    ):
        with pytest.raises(DRIVER_REFUSALS):
            await harness.raw(statement)
    dispatches = faults.table(harness, "approved_action_dispatches")
    for approval in (pending, approved):
        with pytest.raises(DRIVER_REFUSALS):
            await harness.raw(
                f"INSERT INTO {dispatches} (dispatch_id, approval_request_id, project_id, "
                "action_type, action_ref, action_digest, approved_by, created_at_ms) VALUES "
                f"('d-forged-{approval.action_ref}', '{approval.approval_request_id}', "
                f"'proj-1', 'run.create', '{approval.action_ref}', '{approval.action_digest}', "
                "'bob', 1)"
            )
    expected = {pending: (Status.PENDING, 1), approved: (Status.APPROVED, 2)}
    expected[consumed] = (Status.CONSUMED, 3)
    for approval, state in expected.items():
        now = await harness.store.get_approval(approval.approval_request_id)
        assert now is not None
        assert (now.status, now.version) == state
        assert now.decided_by in (None, "bob")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {dispatches}") == 1
