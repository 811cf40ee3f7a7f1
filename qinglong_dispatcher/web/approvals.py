"""The approvals queue and its decisions: list (`viewer`), approve, reject, consume (`approver`).

Each decision runs on the store acting as the token's principal, so the database (PostgreSQL's
grants and triggers, SQLite's store) decides who may approve what, separation of duties
included, and the audit row naming the principal, token, client and request commits with it.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approval_views, approvals, errors
from qinglong_dispatcher.usecases import approving, consuming, rejecting
from qinglong_dispatcher.web import auth, context, problems, reads, writing

_ID = "approval_request_id"


def approval_json(approval: approvals.Approval) -> dict[str, object]:
    """An approval request's JSON members (its plan is not among them)."""
    return {
        "approval_request_id": approval.approval_request_id,
        "project_id": approval.project_id,
        "action_type": approval.action_type,
        "action_ref": approval.action_ref,
        "action_digest": approval.action_digest,
        "status": approval.status.value,
        "version": approval.version,
        "requested_by": approval.requested_by,
        "requested_principal": approval.requested_principal,
        "decided_by": approval.decided_by,
        "decided_principal": approval.decided_principal,
        "consumed_principal": approval.consumed_principal,
        "created_at_ms": approval.created_at_ms,
        "expires_at_ms": approval.expires_at_ms,
        "not_before_ms": approval.not_before_ms,
        "window_for_ms": approval.window_for_ms,
        "resubmitted_from": approval.resubmitted_from,
    }


def _consumed(consumed: approvals.Consumed) -> dict[str, object]:
    return {
        "approval_request_id": consumed.approval_request_id,
        "dispatch_id": consumed.dispatch_id,
        "action_ref": consumed.action_ref,
    }


@auth.requires(auth.Operation.READ)
async def list_approvals(request: web.Request) -> web.Response:
    """`GET /api/v1/approvals`: requests of one status (`?status=`, the waiting ones by
    default), newest first, each with its requester, its plan's redacted preview and, once
    decided, who decided, how and when (what `approval list --json` prints); `from_ms`
    inclusive and `to_ms` exclusive bound the creation time."""
    reads.only_params(
        request, ("action", "project", "limit", "after", "status", "from_ms", "to_ms")
    )
    q = request.query
    action = reads.query_field("action", q.get("action"), reads.identifier("action"))
    project = reads.query_field("project", q.get("project"), reads.identifier("project"))
    limit = reads.query_field("limit", q.get("limit"), reads.parse_limit)
    after = reads.query_field("after", q.get("after"), approval_views.Cursor.parse)
    status = reads.query_field("status", q.get("status"), approval_views.parse_status)
    from_ms = reads.query_field("from_ms", q.get("from_ms"), reads.parse_ms)
    to_ms = reads.query_field("to_ms", q.get("to_ms"), reads.parse_ms)
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise problems.BadField("to_ms", "to_ms: must be after from_ms")
    query = reads.query_field(
        "limit",
        "",
        lambda _: approval_views.ListQuery(
            action_type=action,
            project_id=project,
            limit=approval_views.DEFAULT_LIMIT if limit is None else limit,
            after=after,
            status=status or approval_views.WAITING,
            from_ms=from_ms,
            to_ms=to_ms,
        ),
    )
    assert query is not None
    ctx = context.of(request)
    page = await ctx.store.list_waiting_approvals(query, now_ms=ctx.clock.now_ms(), shown=ctx.shown)
    return writing.ok(
        {
            "approvals": [row.as_dict() for row in page.approvals],
            "next": None if page.next is None else str(page.next),
        }
    )


@auth.requires(auth.Operation.APPROVE)
async def approve(request: web.Request) -> web.Response:
    """`POST /api/v1/approvals/{id}/approve`: approve as the principal, then consume the request
    into its dispatch (two transactions: if the second fails, `consume` finishes it)."""
    admitted = await writing.begin(request, ("comment",))
    if isinstance(admitted, web.Response):
        return admitted
    approval_id = writing.path_id(request, _ID, errors.ApprovalNotFound)
    approved, consumed = await approve_as(context.of(request), admitted, approval_id)
    return writing.ok({"approval": approval_json(approved), **_consumed(consumed)})


async def approve_as(
    ctx: context.Context, admitted: writing.Write, approval_id: str
) -> tuple[approvals.Approval, approvals.Consumed]:
    """Approve `approval_id` as the admitted principal, then consume it into its dispatch (the
    API's `approve` and the operator UI's form)."""
    approved, consumed = await approving.approve_and_consume(
        admitted.store,
        ctx.clock,
        ctx.policy,
        approval_id,
        decided_by=admitted.principal.principal,
        context=admitted.request,
    )
    ctx.metrics.approvals.observe_decision(approved)
    return approved, consumed


@auth.requires(auth.Operation.CONSUME)
async def consume(request: web.Request) -> web.Response:
    """`POST /api/v1/approvals/{id}/consume`: an approved request becomes its dispatch (needed
    only when `approve` committed its approval but not its dispatch)."""
    admitted = await writing.begin(request)
    if isinstance(admitted, web.Response):
        return admitted
    approval_id = writing.path_id(request, _ID, errors.ApprovalNotFound)
    ctx = context.of(request)
    consumed = await consuming.consume(
        admitted.store, ctx.clock, ctx.policy, approval_id, context=admitted.request
    )
    return writing.ok(_consumed(consumed))


@auth.requires(auth.Operation.REJECT)
async def reject(request: web.Request) -> web.Response:
    """`POST /api/v1/approvals/{id}/reject` `{"reason": CODE}`: it can never be approved."""
    admitted = await writing.begin(request, ("reason", "comment"))
    if isinstance(admitted, web.Response):
        return admitted
    approval_id = writing.path_id(request, _ID, errors.ApprovalNotFound)
    rejected = await reject_as(context.of(request), admitted, approval_id)
    return writing.ok({"approval": approval_json(rejected)})


async def reject_as(
    ctx: context.Context, admitted: writing.Write, approval_id: str
) -> approvals.Approval:
    """Reject `approval_id` as the admitted principal with the body's `reason` code (the API's
    `reject` and the operator UI's form)."""
    reason = writing.code(admitted.body, "reason")
    rejected = await rejecting.reject(
        admitted.store,
        ctx.clock,
        approval_id,
        decided_by=admitted.principal.principal,
        reason=reason,
        context=admitted.request,
    )
    ctx.metrics.approvals.observe_decision(rejected)
    return rejected
