"""A comment on the command line's decisions, on every dialect (docs/cli.md): an approve's or a
reject's rides in the deciding update and the database keeps it in the decision's
`approval.*` audit row, read back as the API's are (the decided list's reasons); a settle's is
its own audit row's; a comment that is not one printable line of at most 500 characters is
refused before anything is written."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import (
    approval_views,
    approvals,
    errors,
    plan_previews,
    recovery,
    states,
)
from qinglong_dispatcher.usecases import approving, rejecting, requesting
from tests.support import stores
from tests.support.actions import DEFAULT_TTL_MS, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution

SHOWN = plan_previews.shown_by_type(builtin.PLAN_MODELS)
POLICY = api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5)


async def _request(h: stores.Harness, clock: ManualClock, ref: str) -> approvals.Approval:
    plan = api.run_create_plan({"projectId": "p1", "taskId": ref, "taskRevision": 1})
    return await requesting.request_approval(
        h.approver_store, clock, POLICY, plan, requested_by="sam"
    )


async def _reasons(h: stores.Harness, clock: ManualClock, status: str) -> list[tuple[str, ...]]:
    page = await h.approver_store.list_waiting_approvals(
        approval_views.ListQuery(status=status), now_ms=clock.now_ms(), shown=SHOWN
    )
    return [
        (row.approval_request_id, said.decision, said.comment or "")
        for row in page.approvals
        for said in row.reasons
    ]


async def test_an_approve_and_a_reject_keep_their_comments_in_their_audit_rows(
    harness: stores.Harness, clock: ManualClock
) -> None:
    first, second, third = [await _request(harness, clock, ref) for ref in ("t1", "t2", "t3")]
    store = harness.approver_store
    await approving.approve(
        store, clock, first.approval_request_id, decided_by="bob", comment="  checked the diff "
    )
    await rejecting.reject(
        store, clock, second.approval_request_id, decided_by="bob", comment="dup of t1"
    )
    await approving.approve(store, clock, third.approval_request_id, decided_by="bob")

    assert await _reasons(harness, clock, "approved") == [
        (first.approval_request_id, "approve", "checked the diff")
    ]
    assert await _reasons(harness, clock, "rejected") == [
        (second.approval_request_id, "reject", "dup of t1")
    ]
    audit = await harness.store.audit_events(first.approval_request_id)
    assert [(a.kind, a.comment) for a in audit] == [
        ("approval.created", None),
        ("approval.approved", "checked the diff"),
    ]


@pytest.mark.parametrize("bad", ["two\nlines", "tab\there", "x" * 501])
async def test_a_comment_that_is_not_one_printable_line_is_refused_and_nothing_written(
    harness: stores.Harness, clock: ManualClock, bad: str
) -> None:
    request = await _request(harness, clock, "t1")
    store = harness.approver_store
    with pytest.raises(errors.InvalidInput, match="comment: one printable line"):
        await approving.approve(
            store, clock, request.approval_request_id, decided_by="bob", comment=bad
        )
    with pytest.raises(errors.InvalidInput, match="comment: one printable line"):
        await approving.approve_many(
            store, clock, [request.approval_request_id], decided_by="bob", comment=bad
        )
    with pytest.raises(errors.InvalidInput, match="comment: one printable line"):
        await rejecting.reject(
            store, clock, request.approval_request_id, decided_by="bob", comment=bad
        )
    found = await store.get_approval(request.approval_request_id)
    assert found is not None
    assert found.status is approvals.ApprovalStatus.PENDING
    assert len(await harness.store.audit_events(request.approval_request_id)) == 1


async def test_a_settle_keeps_its_comment_in_its_audit_row(
    harness: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, _ = await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    with pytest.raises(errors.InvalidInput):
        await api.resolve_manually(
            harness.operator_store,
            clock,
            dispatch.dispatch_id,
            resolution=states.Completion.FAILED,
            operator="oncall-1",
            reason="checked",
            comment="two\nlines",
        )
    assert await harness.store.audit_events(dispatch.dispatch_id) == []
    await api.resolve_manually(
        harness.operator_store,
        clock,
        dispatch.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="oncall-1",
        reason="checked",
        comment="the receiver has no order 7",
    )
    audit = await harness.store.audit_events(dispatch.dispatch_id)
    assert [(a.kind, a.comment) for a in audit] == [
        (recovery.AUDIT_MANUAL_RESOLUTION, "the receiver has no order 7")
    ]
