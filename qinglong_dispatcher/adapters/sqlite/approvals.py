"""Approval transactions on SQLite: create, approve, reject, and the atomic consume.

The principal is the OS user running the store (`Principal`): file permissions are the
authority on an edge device. The triggers of migration 0005 allow only the transitions of
`domain/approvals.py` and audit each change; separation of duties is `Principal.self_approval`.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from collections.abc import Sequence

from qinglong_dispatcher.adapters.sqlite import executions
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import approvals, errors, states

ApprovalStatus = approvals.ApprovalStatus


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who acts on the approvals of this store, and whether it may approve its own requests."""

    name: str
    self_approval: bool = True


def new_dispatch_id() -> str:
    """An opaque dispatch id (it is also the downstream idempotency key)."""
    return f"d-{uuid.uuid4().hex}"


def get(conn: sqlite3.Connection, approval_request_id: str) -> approvals.Approval | None:
    """One approval request."""
    row = conn.execute(
        Q["select_approval"], {"approval_request_id": approval_request_id}
    ).fetchone()
    return None if row is None else approvals.Approval.from_row(row)


def _refusal(
    conn: sqlite3.Connection, approval_request_id: str, *, wanted: ApprovalStatus, now_ms: int
) -> errors.ApprovalError:
    """Explain why a conditional approval update matched nothing."""
    current = get(conn, approval_request_id)
    if current is None:
        return errors.ApprovalNotFound(f"approval request {approval_request_id} not found")
    if current.status is wanted and current.is_expired(now_ms):
        return errors.ApprovalExpired(f"approval request {approval_request_id} has expired")
    return errors.ApprovalStateConflict(
        f"approval request {approval_request_id} is {current.status.value}, not {wanted.value}"
    )


def create(
    conn: sqlite3.Connection, new: approvals.NewApproval, *, principal: Principal, now_ms: int
) -> approvals.Approval:
    """Insert the immutable plan and the pending request."""
    if conn.execute(
        Q["select_plan"], {"project_id": new.project_id, "action_ref": new.action_ref}
    ).fetchone():
        raise errors.ApprovalStateConflict(
            f"action {new.action_ref} already has a plan in project {new.project_id}"
        )
    conn.execute(
        Q["insert_plan"],
        {
            "project_id": new.project_id,
            "action_ref": new.action_ref,
            "action_type": new.action_type,
            "plan_json": new.plan_json,
            "plan_digest": new.plan_digest,
            "now_ms": now_ms,
        },
    )
    conn.execute(
        Q["insert_approval"],
        {
            "approval_request_id": new.approval_request_id,
            "project_id": new.project_id,
            "action_type": new.action_type,
            "action_ref": new.action_ref,
            "action_digest": new.action_digest,
            "requested_by": new.requested_by,
            "principal": principal.name,
            "expires_at_ms": new.expires_at_ms,
            "now_ms": now_ms,
        },
    )
    created = get(conn, new.approval_request_id)
    assert created is not None
    return created


def approve(
    conn: sqlite3.Connection,
    approval_request_id: str,
    *,
    decided_by: str,
    principal: Principal,
    now_ms: int,
) -> approvals.Approval:
    """`pending@v1 → approved@v2` while unexpired, by another principal unless allowed."""
    done = conn.execute(
        Q["approve_approval"],
        {
            "approval_request_id": approval_request_id,
            "decided_by": decided_by,
            "principal": principal.name,
            "now_ms": now_ms,
        },
    ).fetchone()
    if done is None:
        raise _refusal(conn, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms)
    # Raising rolls the caller's whole transaction back, the update above included.
    approvals.check_self_approval(
        requester=done["requested_principal"],
        approver=principal.name,
        self_approval=principal.self_approval,
    )
    approved = get(conn, approval_request_id)
    assert approved is not None
    return approved


def reject(
    conn: sqlite3.Connection,
    approval_request_id: str,
    *,
    decided_by: str,
    principal: Principal,
    now_ms: int,
) -> approvals.Approval:
    """`pending@v1 → rejected@v2`: the request can never be approved or consumed."""
    done = conn.execute(
        Q["reject_approval"],
        {
            "approval_request_id": approval_request_id,
            "decided_by": decided_by,
            "principal": principal.name,
            "now_ms": now_ms,
        },
    ).fetchone()
    if done is None:
        raise _refusal(conn, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms)
    rejected = get(conn, approval_request_id)
    assert rejected is not None
    return rejected


def consume(
    conn: sqlite3.Connection,
    approval_request_id: str,
    *,
    principal: Principal,
    now_ms: int,
    max_attempts: int,
) -> approvals.Consumed:
    """`approved@v2 → consumed@v3`, the immutable dispatch and the `pending@v0` execution."""
    done = conn.execute(
        Q["consume_approval"],
        {
            "approval_request_id": approval_request_id,
            "principal": principal.name,
            "now_ms": now_ms,
        },
    ).fetchone()
    if done is None:
        raise _refusal(conn, approval_request_id, wanted=ApprovalStatus.APPROVED, now_ms=now_ms)
    dispatch_id = new_dispatch_id()
    conn.execute(
        Q["insert_dispatch"],
        {
            "dispatch_id": dispatch_id,
            "approval_request_id": approval_request_id,
            "project_id": done["project_id"],
            "action_type": done["action_type"],
            "action_ref": done["action_ref"],
            "action_digest": done["action_digest"],
            "approved_by": done["decided_by"],
            "now_ms": now_ms,
        },
    )
    conn.execute(
        Q["insert_execution"],
        {
            "dispatch_id": dispatch_id,
            "project_id": done["project_id"],
            "max_attempts": max_attempts,
            "now_ms": now_ms,
        },
    )
    executions.record_event(
        conn,
        dispatch_id=dispatch_id,
        version=0,
        from_status=None,
        to_status=states.ExecutionStatus.PENDING,
        attempt=0,
        owner=None,
        token=None,
    )
    return approvals.Consumed(
        approval_request_id=approval_request_id,
        dispatch_id=dispatch_id,
        action_ref=done["action_ref"],
    )


def submit(
    conn: sqlite3.Connection,
    items: Sequence[approvals.NewApproval],
    *,
    approved_by: str,
    principal: Principal,
    now_ms: int,
    max_attempts: int,
) -> list[approvals.Consumed]:
    """Create, approve and consume each item, all in the caller's one transaction.

    A self-approval: refused whole (nothing written) when the principal may not self-approve.
    """
    consumed = []
    for new in items:
        create(conn, new, principal=principal, now_ms=now_ms)
        approve(
            conn,
            new.approval_request_id,
            decided_by=approved_by,
            principal=principal,
            now_ms=now_ms,
        )
        consumed.append(
            consume(
                conn,
                new.approval_request_id,
                principal=principal,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )
    return consumed
