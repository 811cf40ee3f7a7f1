"""A submit's batch (`submit`, the API's submit): create, approve and consume every item in one
transaction, each step one statement for the whole batch (both dialects)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from qinglong_dispatcher.adapters.sql import approvals, plan_reads, query
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import errors, ids

ApprovalStatus = approval_records.ApprovalStatus


async def _move_all(
    q: query.Query,
    statement: str,
    items: Sequence[approval_records.NewApproval],
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
            raise await approvals.refusal(q, approval_request_id, wanted=came_from, now_ms=now_ms)
    return by_id


async def taken_plan(
    q: query.Query, items: Sequence[approval_records.NewApproval]
) -> errors.ApprovalStateConflict | None:
    """Why a submit's plans were refused by their unique key: the first one already stored."""
    keys = [(new.project_id, new.action_ref) for new in items]
    taken = {(p.project_id, p.action_ref) for p in await plan_reads.get_plans(q, keys)}
    return next((approvals.conflict(*key) for key in keys if key in taken), None)


async def submit(
    q: query.Query,
    principal: approval_records.Principal,
    items: Sequence[approval_records.NewApproval],
    *,
    approved_by: str,
    now_ms: int,
    max_attempts: int,
) -> list[approval_records.Consumed]:
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
            raise approvals.conflict(*key)
        seen.add(key)
    await q.run_many("insert_plan", [approvals.plan_row(new, now_ms) for new in items])
    await q.run_many(
        "insert_approval", [approvals.request_row(new, principal, now_ms) for new in items]
    )
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
            approvals.dispatch_row(
                d, new.approval_request_id, consumed[new.approval_request_id], now_ms
            )
            for d, new in pairs
        ],
    )
    await q.run_many(
        "insert_execution",
        [
            approvals.execution_row(d, consumed[new.approval_request_id], max_attempts, now_ms)
            for d, new in pairs
        ],
    )
    return [
        approval_records.Consumed(
            approval_request_id=new.approval_request_id,
            dispatch_id=dispatch_id,
            action_ref=new.action_ref,
        )
        for dispatch_id, new in pairs
    ]
