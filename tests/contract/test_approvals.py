"""Approval requests and the atomic consume, against every dialect's real store."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import approvals, digests, errors, plans
from tests.support import faults
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.stores import Harness


def plan_bytes(**changes: object) -> bytes:
    plan = api.run_create_plan({"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4})
    data = plan.to_canonical_dict()
    data.update(changes)
    from qinglong_dispatcher.domain import canonical

    return canonical.dumps(data)


async def test_create_approve_consume_walks_the_versions(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    created = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    assert (created.status, created.version) == (approvals.ApprovalStatus.PENDING, 1)
    approved = await the_api.approve(created.approval_request_id, decided_by="bob")
    assert (approved.status, approved.version, approved.decided_by) == (
        approvals.ApprovalStatus.APPROVED,
        2,
        "bob",
    )
    consumed = await the_api.consume(created.approval_request_id)
    final = await harness.store.get_approval(created.approval_request_id)
    assert final is not None
    assert (final.status, final.version) == (approvals.ApprovalStatus.CONSUMED, 3)
    dispatch = await harness.store.get_dispatch(consumed.dispatch_id)
    assert dispatch is not None
    assert dispatch.approval_request_id == created.approval_request_id
    assert dispatch.action_digest == created.action_digest
    assert dispatch.approved_by == "bob"
    stored = await harness.store.get_plan("proj-1", created.action_ref)
    assert stored is not None
    plan = plans.parse_plan("run.create", stored.plan_json.encode(), models=builtin.PLAN_MODELS)
    assert plans.plan_action_digest(plan, digests.PLAIN) == dispatch.action_digest


async def test_consume_twice_is_refused_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    created = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    await the_api.approve(created.approval_request_id, decided_by="bob")
    await the_api.consume(created.approval_request_id)
    with pytest.raises(errors.ApprovalStateConflict):
        await the_api.consume(created.approval_request_id)
    count = await harness.scalar(
        f"SELECT count(*) AS n FROM {faults.table(harness, 'approved_action_dispatches')}"
    )
    assert count == 1


async def test_consume_needs_approval_and_an_unknown_id_is_not_found(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    created = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    with pytest.raises(errors.ApprovalStateConflict):
        await the_api.consume(created.approval_request_id)
    with pytest.raises(errors.ApprovalNotFound):
        await the_api.consume("a-unknown")
    with pytest.raises(errors.ApprovalNotFound):
        await the_api.approve("a-unknown", decided_by="bob")


async def test_an_expired_approval_can_be_neither_approved_nor_consumed(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    first = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    second = await the_api.create_approval(
        "run.create", plan_bytes(actionRef="act-second"), requested_by="alice"
    )
    await the_api.approve(second.approval_request_id, decided_by="bob")
    clock.advance(ms=86_400_000)
    with pytest.raises(errors.ApprovalExpired):
        await the_api.approve(first.approval_request_id, decided_by="bob")
    with pytest.raises(errors.ApprovalExpired):
        await the_api.consume(second.approval_request_id)
    still = await harness.store.get_approval(second.approval_request_id)
    assert still is not None
    assert still.status is approvals.ApprovalStatus.APPROVED


async def test_consume_is_atomic_over_approval_dispatch_and_execution(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    created = await the_api.create_approval("run.create", plan_bytes(), requested_by="alice")
    await the_api.approve(created.approval_request_id, decided_by="bob")
    await faults.fail_inserts_into(harness, "approved_action_dispatch_executions")
    with pytest.raises(errors.StoreError):
        await the_api.consume(created.approval_request_id)
    approval = await harness.store.get_approval(created.approval_request_id)
    assert approval is not None
    assert (approval.status, approval.version) == (approvals.ApprovalStatus.APPROVED, 2)
    for name in ("approved_action_dispatches", "approved_action_dispatch_executions"):
        assert await harness.scalar(f"SELECT count(*) AS n FROM {faults.table(harness, name)}") == 0


async def test_bulk_submit_is_all_or_nothing(harness: Harness, clock: ManualClock) -> None:
    the_api = make_api(harness.approver_store, clock)
    good = api.run_create_plan({"projectId": "proj-1", "taskId": "t-1", "taskRevision": 1})
    clash = api.run_create_plan(
        {"projectId": "proj-1", "taskId": "t-2", "taskRevision": 1, "actionRef": good.action_ref}
    )
    with pytest.raises(errors.ApprovalStateConflict):
        await the_api.submit([good, clash], requested_by="alice", approved_by="bob")
    for name in ("action_plans", "approval_requests", "approved_action_dispatches"):
        assert await harness.scalar(f"SELECT count(*) AS n FROM {faults.table(harness, name)}") == 0


async def test_a_submit_naming_a_stored_plan_is_refused_with_its_name_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    stored = api.run_create_plan({"projectId": "proj-1", "taskId": "t-1", "taskRevision": 1})
    await the_api.submit([stored], requested_by="alice", approved_by="bob")
    fresh = api.run_create_plan({"projectId": "proj-1", "taskId": "t-2", "taskRevision": 1})
    again = api.run_create_plan(
        {"projectId": "proj-1", "taskId": "t-3", "taskRevision": 1, "actionRef": stored.action_ref}
    )
    with pytest.raises(errors.ApprovalStateConflict) as refused:
        await the_api.submit([fresh, again], requested_by="alice", approved_by="bob")
    assert str(refused.value) == f"action {stored.action_ref} already has a plan in project proj-1"
    for name in ("action_plans", "approval_requests", "approved_action_dispatches"):
        assert await harness.scalar(f"SELECT count(*) AS n FROM {faults.table(harness, name)}") == 1


async def test_plans_are_exact_shape(harness: Harness, clock: ManualClock) -> None:
    the_api = make_api(harness.approver_store, clock)
    with pytest.raises(errors.PlanInvalid):
        await the_api.create_approval("run.create", plan_bytes(extra=1), requested_by="alice")
    with pytest.raises(errors.UnknownActionType):
        await the_api.create_approval("shell.exec", plan_bytes(), requested_by="alice")
    with pytest.raises(errors.InvalidInput):
        await the_api.create_approval("run.create", plan_bytes(), requested_by="bad name!")
    assert (
        await harness.scalar(
            f"SELECT count(*) AS n FROM {faults.table(harness, 'approval_requests')}"
        )
        == 0
    )


async def test_plans_of_a_page_are_read_in_one_go(harness: Harness, clock: ManualClock) -> None:
    from tests.support.actions import submit_runs

    consumed = await submit_runs(harness.approver_store, clock, 3)
    dispatches = [await harness.store.get_dispatch(c.dispatch_id) for c in consumed]
    keys = [(d.project_id, d.action_ref) for d in dispatches if d is not None]
    found = await harness.store.get_plans([*keys, ("proj-1", "act-missing")])
    assert sorted((p.project_id, p.action_ref) for p in found) == sorted(keys)
    assert all(p.action_type == "run.create" for p in found)
    assert await harness.store.get_plans([]) == []
