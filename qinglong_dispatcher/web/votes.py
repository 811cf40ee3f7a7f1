"""An approval request with its policy and votes (`viewer`), a vote (`approver`), and the
policies in force (`viewer`).

The database applies each request's policy (docs/security.md#approval-policies): the vote is
written by the store acting as the token's principal, and a refusal is the database's own
(who may vote, the requester, a decided or expired request, a second vote), answered as
problem+json. A vote that leaves the request approved is consumed into its dispatch at once,
as `approve` does.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approvals, errors, policies
from qinglong_dispatcher.usecases import consuming, voting
from qinglong_dispatcher.web import approvals as approval_routes
from qinglong_dispatcher.web import auth, context, problems, reads, writing

_ID = "approval_request_id"
_MEMBERS = ("vote", "reason")


async def detail(
    ctx: context.Context, approval_id: str
) -> tuple[approvals.Approval, policies.VoteState]:
    """The request and its policy, votes, voters and expiry (404 when there is none)."""
    approval = await ctx.store.get_approval(approval_id)
    state = await ctx.store.vote_state(approval_id)
    if approval is None or state is None:
        raise errors.ApprovalNotFound(f"approval request {approval_id} not found")
    return approval, state


async def detail_json(ctx: context.Context, approval_id: str) -> dict[str, object]:
    """The approval resource: the request, its policy, its votes, who else may vote, its time
    to expiry and the requests made again from it (404 when there is no such request)."""
    approval, state = await detail(ctx, approval_id)
    again = {"requested_again": list(await ctx.store.requested_again(approval_id))}
    return (
        approval_routes.approval_json(approval) | state.as_dict(now_ms=ctx.clock.now_ms()) | again
    )


@auth.requires(auth.Operation.READ)
async def show_approval(request: web.Request) -> web.Response:
    """`GET /api/v1/approvals/{id}`: one request, its policy, votes, voters and expiry."""
    reads.only_params(request, ())
    approval_id = writing.path_id(request, _ID, errors.ApprovalNotFound)
    return writing.ok({"approval": await detail_json(context.of(request), approval_id)})


def choice_of(body: dict[str, object]) -> tuple[approvals.Vote, str | None]:
    """The body's `vote` and `reason` (400 naming the member at fault)."""
    value = body.get("vote")
    if value not in (approvals.Vote.APPROVE.value, approvals.Vote.DENY.value):
        raise problems.BadField("vote", "vote: required, approve or deny")
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise problems.BadField("reason", "reason: must be a string")
    try:
        return approvals.Vote(str(value)), policies.check_reason(reason)
    except errors.InvalidInput as exc:
        raise problems.BadField("reason", str(exc)) from None


async def vote_as(
    ctx: context.Context, admitted: writing.Write, approval_id: str
) -> tuple[approvals.Approval, approvals.Consumed | None]:
    """Cast the admitted principal's vote from the body; a request it approved is consumed
    into its dispatch (the API's vote and the operator UI's form)."""
    choice, reason = choice_of(admitted.body)
    voted = await voting.vote(
        admitted.store,
        ctx.clock,
        approval_id,
        choice,
        reason=reason,
        context=admitted.request,
        voted_by=admitted.principal.principal,
    )
    ctx.metrics.approvals.observe_decision(voted)
    if voted.status is not approvals.ApprovalStatus.APPROVED:
        return voted, None
    consumed = await consuming.consume(
        admitted.store, ctx.clock, ctx.policy, approval_id, context=admitted.request
    )
    return voted, consumed


async def _vote(request: web.Request, admitted: writing.Write) -> web.Response:
    ctx = context.of(request)
    approval_id = writing.path_id(request, _ID, errors.ApprovalNotFound)
    _, consumed = await vote_as(ctx, admitted, approval_id)
    answer: dict[str, object] = {"approval": await detail_json(ctx, approval_id)}
    if consumed is not None:
        answer["dispatch_id"] = consumed.dispatch_id
    return writing.ok(answer)


@auth.requires(auth.Operation.APPROVE)
async def vote(request: web.Request) -> web.Response:
    """`POST /api/v1/approvals/{id}/votes` `{"vote": "approve"|"deny", "reason": TEXT}`: the
    principal's one vote; the request as the votes left it."""
    key = writing.idempotency_key(request)
    admitted = await writing.begin(request, _MEMBERS)
    if isinstance(admitted, web.Response):
        return admitted
    # The key names this request's vote: the same body on another request is another write.
    what = {"path": request.path, "body": admitted.body}
    return await writing.keyed(request, admitted, key, what, _vote)


@auth.requires(auth.Operation.READ)
async def list_policies(request: web.Request) -> web.Response:
    """`GET /api/v1/policies`: the newest version of each policy unless it retired it."""
    reads.only_params(request, ())
    found = await context.of(request).store.policies_in_force()
    return writing.ok({"policies": [p.as_dict() for p in found]})
