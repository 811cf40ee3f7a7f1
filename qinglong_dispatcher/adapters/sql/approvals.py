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

import json
from collections.abc import Sequence
from typing import Any

from qinglong_dispatcher.adapters.sql import plan_reads, query, tokens
from qinglong_dispatcher.domain import approvals, errors, ids, principals

ApprovalStatus = approvals.ApprovalStatus


async def get(q: query.Query, approval_request_id: str) -> approvals.Approval | None:
    """One approval request."""
    row = await q.one("select_approval", {"approval_request_id": approval_request_id})
    return None if row is None else approvals.Approval.from_row(row)


async def _refusal(
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
        raise _conflict(new.project_id, new.action_ref)
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
) -> Any:
    """`pending@v1 → <decision>@v2` while unexpired; the refusal explained when it matched none."""
    done = await q.one(
        statement,
        {
            "approval_request_id": approval_request_id,
            "decided_by": decided_by,
            "principal": principal.name,
            "now_ms": now_ms,
        },
    )
    if done is None:
        raise await _refusal(q, approval_request_id, wanted=ApprovalStatus.PENDING, now_ms=now_ms)
    return done


async def approve(
    q: query.Query,
    principal: approvals.Principal,
    approval_request_id: str,
    *,
    decided_by: str,
    now_ms: int,
    context: principals.RequestContext | None = None,
) -> approvals.Approval:
    """`pending@v1 → approved@v2`, by another principal unless self-approval is allowed."""
    done = await _decide(
        q,
        "approve_approval",
        approval_request_id,
        decided_by=decided_by,
        principal=principal,
        now_ms=now_ms,
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
) -> list[approvals.Approval]:
    """`approve` each request in order, in the caller's transaction; `at` collects the ids
    tried, so the caller can name the one a refusal (raised, rolling all back) is about."""
    done = []
    for approval_request_id in ids:
        at.append(approval_request_id)
        done.append(
            await approve(q, principal, approval_request_id, decided_by=decided_by, now_ms=now_ms)
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
        raise await _refusal(q, approval_request_id, wanted=ApprovalStatus.APPROVED, now_ms=now_ms)
    dispatch_id = ids.new_dispatch_id(now_ms)
    await q.run("insert_dispatch", _dispatch_row(dispatch_id, approval_request_id, done, now_ms))
    await q.run("insert_execution", _execution_row(dispatch_id, done, max_attempts, now_ms))
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


def _dispatch_row(
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


def _execution_row(
    dispatch_id: str, done: Any, max_attempts: int, now_ms: int
) -> dict[str, object]:
    return {
        "dispatch_id": dispatch_id,
        "project_id": done["project_id"],
        "max_attempts": max_attempts,
        "now_ms": now_ms,
    }


async def _move_all(
    q: query.Query,
    statement: str,
    items: Sequence[approvals.NewApproval],
    params: query.Params,
    *,
    came_from: ApprovalStatus,
    now_ms: int,
) -> dict[str, Any]:
    """Move every request of a batch with one statement, which returns the rows it moved; the
    first request it did not move is explained as a refusal (raised: the caller's transaction
    rolls back)."""
    wanted = [new.approval_request_id for new in items]
    rows = await q.all(statement, {**params, "ids": json.dumps(wanted)})
    by_id = {row["approval_request_id"]: row for row in rows}
    for approval_request_id in wanted:
        if approval_request_id not in by_id:
            raise await _refusal(q, approval_request_id, wanted=came_from, now_ms=now_ms)
    return by_id


def _conflict(project_id: str, action_ref: str) -> errors.ApprovalStateConflict:
    return errors.ApprovalStateConflict(
        f"action {action_ref} already has a plan in project {project_id}"
    )


async def taken_plan(
    q: query.Query, items: Sequence[approvals.NewApproval]
) -> errors.ApprovalStateConflict | None:
    """Why a submit's plans were refused by their unique key: the first one already stored."""
    keys = [(new.project_id, new.action_ref) for new in items]
    taken = {(p.project_id, p.action_ref) for p in await plan_reads.get_plans(q, keys)}
    return next((_conflict(*key) for key in keys if key in taken), None)


async def submit(
    q: query.Query,
    principal: approvals.Principal,
    items: Sequence[approvals.NewApproval],
    *,
    approved_by: str,
    now_ms: int,
    max_attempts: int,
) -> list[approvals.Consumed]:
    """Create, approve and consume every item, all in one transaction.

    Each step is one statement for the whole batch: the inserts run once per item in one
    round trip (`Query.run_many`), the approval and the consumption are one statement each
    that returns the rows it moved. The database's triggers judge each row as for one request,
    and any refusal rolls the whole batch back. A plan already stored is refused by its unique
    key (the store names it, `taken_plan`); a self-approval is refused whole when the
    principal may not self-approve.
    """
    if not items:
        return []
    seen: set[tuple[str, str]] = set()
    for new in items:  # twice in this batch
        key = (new.project_id, new.action_ref)
        if key in seen:
            raise _conflict(*key)
        seen.add(key)
    await q.run_many("insert_plan", [plan_row(new, now_ms) for new in items])
    await q.run_many("insert_approval", [request_row(new, principal, now_ms) for new in items])
    decision = {"decided_by": approved_by, "principal": principal.name, "now_ms": now_ms}
    approved = await _move_all(
        q, "approve_approvals", items, decision, came_from=ApprovalStatus.PENDING, now_ms=now_ms
    )
    for row in approved.values():
        principal.check_may_approve(row["requested_principal"])
    consumed = await _move_all(
        q, "consume_approvals", items, decision, came_from=ApprovalStatus.APPROVED, now_ms=now_ms
    )
    dispatch_ids = [ids.new_dispatch_id(now_ms) for _ in items]
    pairs = list(zip(dispatch_ids, items, strict=True))
    await q.run_many(
        "insert_dispatch",
        [
            _dispatch_row(d, new.approval_request_id, consumed[new.approval_request_id], now_ms)
            for d, new in pairs
        ],
    )
    await q.run_many(
        "insert_execution",
        [
            _execution_row(d, consumed[new.approval_request_id], max_attempts, now_ms)
            for d, new in pairs
        ],
    )
    return [
        approvals.Consumed(
            approval_request_id=new.approval_request_id,
            dispatch_id=dispatch_id,
            action_ref=new.action_ref,
        )
        for dispatch_id, new in pairs
    ]
