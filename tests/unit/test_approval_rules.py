"""The pure approval rules: separation of duties, the transition set and audit kinds."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import approvals, errors

Status = approvals.ApprovalStatus


def test_self_approval_is_refused_only_when_off_and_the_principals_are_equal() -> None:
    approvals.check_self_approval(requester="alice", approver="bob", self_approval=False)
    approvals.check_self_approval(requester="alice", approver="alice", self_approval=True)
    with pytest.raises(errors.SelfApprovalRefused) as caught:
        approvals.check_self_approval(requester="alice", approver="alice", self_approval=False)
    assert caught.value.code == "self_approval_refused"
    assert isinstance(caught.value, errors.ApprovalError)


def test_transitions_leave_pending_once_and_nothing_leaves_a_terminal_state() -> None:
    assert {to for frm, to in approvals.TRANSITIONS if frm is Status.PENDING} == {
        Status.APPROVED,
        Status.REJECTED,
        Status.EXPIRED,
    }
    assert {(frm, to) for frm, to in approvals.TRANSITIONS if frm is not Status.PENDING} == {
        (Status.APPROVED, Status.CONSUMED)
    }
    assert not any(frm in approvals.TERMINAL for frm, _ in approvals.TRANSITIONS)
    for frm, to in approvals.TRANSITIONS:
        assert approvals.VERSION_OF[to] == approvals.VERSION_OF[frm] + 1


def test_audit_kinds_name_the_state_entered() -> None:
    assert [approvals.audit_kind(s) for s in Status] == [
        "approval.created",
        "approval.approved",
        "approval.consumed",
        "approval.rejected",
        "approval.expired",
    ]
