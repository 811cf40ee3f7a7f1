"""Votes through the store, both dialects: without a policy a vote is today's decision (one
approval or one rejection); under a policy the database counts them and refuses the
requester's vote and an approval that falls short, with the typed refusal of each."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, errors
from qinglong_dispatcher.usecases import approving, voting
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

Vote = approvals.Vote


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _requested(h: stores.Harness, clock: ManualClock, ref: str) -> str:
    created = await make_api(h.approver_store, clock).create_approval(
        "run.create", _plan(ref), requested_by="alice"
    )
    return created.approval_request_id


async def _votes(h: stores.Harness, request: str) -> list[tuple[str, str | None]]:
    table = "approval_votes" if h.dialect == "sqlite" else "qinglong.approval_votes"
    rows = await h.raw(f"SELECT vote, reason FROM {table} WHERE approval_request_id = '{request}'")
    return [(r["vote"], r["reason"]) for r in rows]


async def test_without_a_policy_one_vote_decides_as_approve_and_reject_did(
    harness: stores.Harness, clock: ManualClock
) -> None:
    store = harness.approver_store
    approved = await voting.vote(
        store, clock, await _requested(harness, clock, "act-1"), Vote.APPROVE, reason="ok"
    )
    assert approved.status is approvals.ApprovalStatus.APPROVED
    assert await _votes(harness, approved.approval_request_id) == [("approve", "ok")]
    rejected = await voting.vote(store, clock, await _requested(harness, clock, "act-2"), Vote.DENY)
    assert rejected.status is approvals.ApprovalStatus.REJECTED
    with pytest.raises(errors.ApprovalStateConflict, match="takes no votes"):
        await voting.vote(store, clock, rejected.approval_request_id, Vote.APPROVE)
    # `approve` without a policy is today's path: it writes no vote.
    request = await _requested(harness, clock, "act-3")
    await approving.approve(store, clock, request, decided_by="bob")
    assert await _votes(harness, request) == []


async def test_under_a_policy_the_requester_may_not_vote_and_one_approval_falls_short(
    harness: stores.Harness, clock: ManualClock
) -> None:
    if harness.dialect == "sqlite":
        await harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "written_by) VALUES ('two', 1, 'run.create', 2, 'owner')"
        )
    else:
        await harness.raw(
            "INSERT INTO qinglong.approval_policies (name, version, action_type, "
            "approvals_required) VALUES ('two', 1, 'run.create', 2)"
        )
    store = harness.approver_store
    request = await _requested(harness, clock, "act-policy")
    with pytest.raises(errors.SelfApprovalRefused):
        await voting.vote(store, clock, request, Vote.APPROVE, reason="mine")
    # Short of the number and by the requester: either rule may refuse it first.
    with pytest.raises((errors.ApprovalTransitionRefused, errors.SelfApprovalRefused)):
        await approving.approve(store, clock, request, decided_by="alice")
    assert await _votes(harness, request) == []
    current = await store.get_approval(request)
    assert current is not None
    assert current.status is approvals.ApprovalStatus.PENDING
