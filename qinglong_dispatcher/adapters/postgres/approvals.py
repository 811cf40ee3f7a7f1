"""Approval transactions on PostgreSQL: create, approve, reject, and the atomic consume.

The principal of each step is the session's login (`session_user`, written by the server).
The database decides who may approve and whether a requester may approve its own request
(migration 0005's trigger: `qinglong_approver`, `qinglong_self_approver`); its refusals reach
the caller typed (`database.translate`), with the whole transaction rolled back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import executions
from qinglong_dispatcher.adapters.postgres.queries import Q
from qinglong_dispatcher.domain import approvals, errors, states

ApprovalStatus = approvals.ApprovalStatus


def new_dispatch_id() -> str:
    """An opaque dispatch id (it is also the downstream idempotency key)."""
    return f"d-{uuid.uuid4().hex}"


async def get(conn: db.Connection, approval_request_id: str) -> approvals.Approval | None:
    """One approval request."""
    row = await db.fetchrow(
        conn, Q["select_approval"], {"approval_request_id": approval_request_id}
    )
    return None if row is None else approvals.Approval.from_row(row)


async def _refusal(
    conn: db.Connection, approval_request_id: str, *, wanted: ApprovalStatus, now_ms: int
) -> errors.ApprovalError:
    """Explain why a conditional approval update matched nothing."""
    current = await get(conn, approval_request_id)
    if current is None:
        return errors.ApprovalNotFound(f"approval request {approval_request_id} not found")
    if current.status is wanted and current.is_expired(now_ms):
        return errors.ApprovalExpired(f"approval request {approval_request_id} has expired")
    return errors.ApprovalStateConflict(
        f"approval request {approval_request_id} is {current.status.value}, not {wanted.value}"
    )


async def create(
    conn: db.Connection, new: approvals.NewApproval, *, now_ms: int
) -> approvals.Approval:
    """Insert the immutable plan and the pending request."""
    existing = await db.fetchrow(
        conn, Q["select_plan"], {"project_id": new.project_id, "action_ref": new.action_ref}
    )
    if existing is not None:
        raise errors.ApprovalStateConflict(
            f"action {new.action_ref} already has a plan in project {new.project_id}"
        )
    await db.execute(
        conn,
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
    await db.execute(
        conn,
        Q["insert_approval"],
        {
            "approval_request_id": new.approval_request_id,
            "project_id": new.project_id,
            "action_type": new.action_type,
            "action_ref": new.action_ref,
            "action_digest": new.action_digest,
            "requested_by": new.requested_by,
            "expires_at_ms": new.expires_at_ms,
            "now_ms": now_ms,
        },
    )
    created = await get(conn, new.approval_request_id)
    assert created is not None
    return created


async def approve(
    conn: db.Connection, approval_request_id: str, *, decided_by: str, now_ms: int
) -> approvals.Approval:
    """`pending@v1 → approved@v2` while unexpired; the trigger checks the login's roles."""
    done = await db.fetchrow(
        conn,
        Q["approve_approval"],
        {"approval_request_id": approval_request_id, "decided_by": decided_by, "now_ms": now_ms},
    )
    if done is None:
        raise await _refusal(
            conn, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms
        )
    approved = await get(conn, approval_request_id)
    assert approved is not None
    return approved


async def reject(
    conn: db.Connection, approval_request_id: str, *, decided_by: str, now_ms: int
) -> approvals.Approval:
    """`pending@v1 → rejected@v2`, by an approver or the requester itself (the trigger)."""
    done = await db.fetchrow(
        conn,
        Q["reject_approval"],
        {"approval_request_id": approval_request_id, "decided_by": decided_by, "now_ms": now_ms},
    )
    if done is None:
        raise await _refusal(
            conn, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms
        )
    rejected = await get(conn, approval_request_id)
    assert rejected is not None
    return rejected


async def consume(
    conn: db.Connection, approval_request_id: str, *, now_ms: int, max_attempts: int
) -> approvals.Consumed:
    """`approved@v2 → consumed@v3`, the immutable dispatch and the `pending@v0` execution."""
    done = await db.fetchrow(
        conn,
        Q["consume_approval"],
        {"approval_request_id": approval_request_id, "now_ms": now_ms},
    )
    if done is None:
        raise await _refusal(
            conn, approval_request_id, wanted=ApprovalStatus.APPROVED, now_ms=now_ms
        )
    dispatch_id = new_dispatch_id()
    await db.execute(
        conn,
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
    await db.execute(
        conn,
        Q["insert_execution"],
        {
            "dispatch_id": dispatch_id,
            "project_id": done["project_id"],
            "max_attempts": max_attempts,
            "now_ms": now_ms,
        },
    )
    await executions.record_event(
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


async def submit(
    conn: db.Connection,
    items: Sequence[approvals.NewApproval],
    *,
    approved_by: str,
    now_ms: int,
    max_attempts: int,
) -> list[approvals.Consumed]:
    """Create, approve and consume each item, all in the caller's one transaction.

    A self-approval: the trigger refuses it (and so the whole transaction) unless the login
    is in `qinglong_approver` and `qinglong_self_approver`.
    """
    consumed = []
    for new in items:
        await create(conn, new, now_ms=now_ms)
        await approve(conn, new.approval_request_id, decided_by=approved_by, now_ms=now_ms)
        consumed.append(
            await consume(conn, new.approval_request_id, now_ms=now_ms, max_attempts=max_attempts)
        )
    return consumed
