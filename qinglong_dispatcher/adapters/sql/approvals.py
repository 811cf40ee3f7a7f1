"""Approval transactions: create, approve, reject, and the atomic consume (both dialects).

The principal is the one the system authenticated (`approvals.Principal`): on PostgreSQL the
statements write the acting principal (`qinglong.acting_principal()`: the login, or the
principal role the API became) and the triggers of 0005/0015 apply the roles; on SQLite the
store names the OS user or the API's authenticated principal and applies separation of duties
itself. An API write passes its request (`principals.RequestContext`): its audit row commits
in the same transaction. On both, the triggers allow
only the transitions of `domain/approvals.py` and audit every change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qinglong_dispatcher.adapters.sql import query, tokens
from qinglong_dispatcher.domain import approvals, errors, ids, principals

ApprovalStatus = approvals.ApprovalStatus


async def get(q: query.Query, approval_request_id: str) -> approvals.Approval | None:
    """One approval request."""
    row = await q.one("select_approval", {"approval_request_id": approval_request_id})
    return None if row is None else approvals.Approval.from_row(row)


async def refusal(
    q: query.Query, approval_request_id: str, *, wanted: ApprovalStatus, now_ms: int
) -> errors.ApprovalError:
    """Explain why a conditional approval update matched nothing."""
    current = await get(q, approval_request_id)
    if current is None:
        return errors.ApprovalNotFound(f"approval request {approval_request_id} not found")
    if current.status is ApprovalStatus.EXPIRED or (
        current.status is wanted and current.is_expired(now_ms)
    ):
        return errors.ApprovalExpired(f"approval request {approval_request_id} has expired")
    return errors.ApprovalStateConflict(
        f"approval request {approval_request_id} is {current.status.value}, not {wanted.value}"
    )


async def create(
    q: query.Query,
    principal: approvals.Principal,
    new: approvals.NewApproval,
    *,
    now_ms: int,
    context: principals.RequestContext | None = None,
) -> approvals.Approval:
    """Insert the immutable plan and the pending request."""
    if await q.one("plan_exists", {"project_id": new.project_id, "action_ref": new.action_ref}):
        raise conflict(new.project_id, new.action_ref)
    await q.run("insert_plan", plan_row(new, now_ms))
    await q.run("insert_approval", request_row(new, principal, now_ms))
    created = await get(q, new.approval_request_id)
    assert created is not None
    await _audit(q, principal, context, "create", created, new.requested_by)
    return created


def plan_row(new: approvals.NewApproval, now_ms: int) -> dict[str, object]:
    """The parameters of `insert_plan` (those of a sealed plan None when it is in clear)."""
    sealed = new.sealed
    return {
        "project_id": new.project_id,
        "action_ref": new.action_ref,
        "action_type": new.action_type,
        "plan_json": new.plan_json,
        "plan_digest": new.plan_digest,
        "now_ms": now_ms,
        "plan_key_id": None if sealed is None else sealed.key_id,
        "plan_algorithm": None if sealed is None else sealed.algorithm,
        "plan_sealed": None if sealed is None else sealed.data,
        "plan_schema_version": None if sealed is None else sealed.schema_version,
        "target": new.target,
    }


def request_row(
    new: approvals.NewApproval, principal: approvals.Principal, now_ms: int
) -> dict[str, object]:
    """The parameters of `insert_approval`: a pending request at version 1."""
    return {
        "approval_request_id": new.approval_request_id,
        "project_id": new.project_id,
        "action_type": new.action_type,
        "action_ref": new.action_ref,
        "action_digest": new.action_digest,
        "requested_by": new.requested_by,
        "principal": principal.name,
        "expires_at_ms": new.expires_at_ms,
        "now_ms": now_ms,
        "traceparent": new.traceparent,
        "resubmitted_from": new.resubmitted_from,
        "not_before_ms": new.not_before_ms,
        "window_for_ms": new.window_for_ms,
    }


async def _audit(
    q: query.Query,
    principal: approvals.Principal,
    context: principals.RequestContext | None,
    operation: str,
    approval: approvals.Approval,
    actor: str,
    *,
    detail_code: str | None = None,
) -> None:
    await tokens.record_request(
        q,
        context,
        principal=principal.name,
        operation=operation,
        actor=actor,
        project_id=approval.project_id,
        subject_id=approval.approval_request_id,
        detail_code=approval.action_type if detail_code is None else detail_code,
    )


async def _decide(
    q: query.Query,
    statement: str,
    approval_request_id: str,
    *,
    decided_by: str,
    principal: approvals.Principal,
    now_ms: int,
    comment: str | None,
) -> Any:
    """`pending@v1 → <decision>@v2` while unexpired; the refusal explained when it matched none.
    A `comment` rides in the update, and the audit trigger keeps it in the decision's row."""
    done = await q.one(
        statement,
        {
            "approval_request_id": approval_request_id,
            "decided_by": decided_by,
            "principal": principal.name,
            "now_ms": now_ms,
            "comment": comment,
        },
    )
    if done is None:
        raise await refusal(q, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms)
    return done


async def approve(
    q: query.Query,
    principal: approvals.Principal,
    approval_request_id: str,
    *,
    decided_by: str,
    now_ms: int,
    context: principals.RequestContext | None = None,
    comment: str | None = None,
) -> approvals.Approval:
    """`pending@v1 → approved@v2`, by another principal unless self-approval is allowed."""
    done = await _decide(
        q,
        "approve_approval",
        approval_request_id,
        decided_by=decided_by,
        principal=principal,
        now_ms=now_ms,
        comment=comment,
    )
    # Raising rolls the caller's whole transaction back, the update above included.
    principal.check_may_approve(done["requested_principal"])
    approved = await get(q, approval_request_id)
    assert approved is not None
    await _audit(q, principal, context, "approve", approved, decided_by)
    return approved


async def approve_each(
    q: query.Query,
    principal: approvals.Principal,
    ids: Sequence[str],
    *,
    decided_by: str,
    now_ms: int,
    at: list[str],
    comment: str | None = None,
) -> list[approvals.Approval]:
    """`approve` each request in order, in the caller's transaction; `at` collects the ids
    tried, so the caller can name the one a refusal (raised, rolling all back) is about."""
    done = []
    for approval_request_id in ids:
        at.append(approval_request_id)
        done.append(
            await approve(
                q,
                principal,
                approval_request_id,
                decided_by=decided_by,
                now_ms=now_ms,
                comment=comment,
            )
        )
    return done


def refused_in_batch(exc: errors.QinglongError, approval_request_id: str, total: int) -> Exception:
    """The refusal of one request of an `approve_many`, naming it: same type, one line."""
    why = str(exc).removeprefix(f"approval request {approval_request_id} ")
    message = f"approval request {approval_request_id} refused ({why}); none of {total} approved"
    return exc.__class__(message, code=exc.code)


async def reject(
    q: query.Query,
    principal: approvals.Principal,
    approval_request_id: str,
    *,
    decided_by: str,
    now_ms: int,
    context: principals.RequestContext | None = None,
    reason: str | None = None,
    comment: str | None = None,
) -> approvals.Approval:
    """`pending@v1 → rejected@v2`: the request can never be approved or consumed. An API
    request's `reason` code is its audit row's `detail_code` (else the action type)."""
    await _decide(
        q,
        "reject_approval",
        approval_request_id,
        decided_by=decided_by,
        principal=principal,
        now_ms=now_ms,
        comment=comment,
    )
    rejected = await get(q, approval_request_id)
    assert rejected is not None
    await _audit(q, principal, context, "reject", rejected, decided_by, detail_code=reason)
    return rejected


async def consume(
    q: query.Query,
    principal: approvals.Principal,
    approval_request_id: str,
    *,
    now_ms: int,
    max_attempts: int,
    context: principals.RequestContext | None = None,
) -> approvals.Consumed:
    """`approved@v2 → consumed@v3`, the immutable dispatch and the `pending@v0` execution; an
    API request's audit row (`api.consume`) names the dispatch."""
    done = await q.one(
        "consume_approval",
        {
            "approval_request_id": approval_request_id,
            "principal": principal.name,
            "now_ms": now_ms,
        },
    )
    if done is None:
        raise await refusal(q, approval_request_id, wanted=ApprovalStatus.APPROVED, now_ms=now_ms)
    dispatch_id = ids.new_dispatch_id(now_ms)
    await q.run("insert_dispatch", dispatch_row(dispatch_id, approval_request_id, done, now_ms))
    await q.run("insert_execution", execution_row(dispatch_id, done, max_attempts, now_ms))
    await tokens.record_request(
        q,
        context,
        principal=principal.name,
        operation="consume",
        actor=principal.name or "database",
        project_id=done["project_id"],
        subject_id=dispatch_id,
        detail_code=done["action_type"],
    )
    return approvals.Consumed(
        approval_request_id=approval_request_id,
        dispatch_id=dispatch_id,
        action_ref=done["action_ref"],
    )


def dispatch_row(
    dispatch_id: str, approval_request_id: str, done: Any, now_ms: int
) -> dict[str, object]:
    """`done`: the consumed request (project, action type, ref and digest, decided by)."""
    return {
        "dispatch_id": dispatch_id,
        "approval_request_id": approval_request_id,
        "project_id": done["project_id"],
        "action_type": done["action_type"],
        "action_ref": done["action_ref"],
        "action_digest": done["action_digest"],
        "approved_by": done["decided_by"],
        "now_ms": now_ms,
    }


def execution_row(dispatch_id: str, done: Any, max_attempts: int, now_ms: int) -> dict[str, object]:
    return {
        "dispatch_id": dispatch_id,
        "project_id": done["project_id"],
        "max_attempts": max_attempts,
        "now_ms": now_ms,
    }


def conflict(project_id: str, action_ref: str) -> errors.ApprovalStateConflict:
    return errors.ApprovalStateConflict(
        f"action {action_ref} already has a plan in project {project_id}"
    )
