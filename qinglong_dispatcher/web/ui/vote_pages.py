"""An approval request's page (its policy, the votes so far, who else may vote, the time to
expiry, and the vote forms) and the policies page.

A vote is written by the store acting as the signed-in principal (`guard.admit`, the API's own
admission) after a confirmation step, so the database decides who may vote and when the votes
decide the request: a refusal is shown with its message, as the API answers it.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approvals, errors, permissions, plans, policies
from qinglong_dispatcher.web import context, votes
from qinglong_dispatcher.web.ui import approval_pages, guard, markup, resubmit_pages, sessions

Operation = permissions.Operation


def _id(request: web.Request) -> str:
    value = request.match_info["approval_request_id"]
    if not plans.is_identifier(value):
        raise errors.ApprovalNotFound("no such id (not an id)")
    return value


def _page(approval_id: str) -> str:
    return "/ui/approvals/" + markup.segment(approval_id)


def _remaining(ms: int) -> str:
    if ms <= 0:
        return "expired: it takes no vote (a reconcile pass marks it)"
    minutes, _ = divmod(ms // 1000, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def _policy(state: policies.VoteState) -> str:
    policy = state.policy
    if policy is None:
        return (
            "<h2>Policy</h2>"
            '<p class="muted">None: one approval by an approver who is not the requester '
            "decides it, as does one rejection.</p>"
        )
    approved = state.count(approvals.Vote.APPROVE)
    denied = state.count(approvals.Vote.DENY)
    return "<h2>Policy</h2>" + markup.facts(
        (
            ("policy", markup.esc(f"{policy.name} (version {policy.version})")),
            (
                "approvals",
                f'<b class="tally" id="tally">{approved} of {policy.approvals_required}</b>',
            ),
            ("denials", markup.esc(f"{denied} of {policy.denials_to_reject} to reject")),
            ("groups", markup.esc(", ".join(policy.approver_groups) or "any approver")),
            ("reason", "required for every vote" if policy.reason_required else "optional"),
        )
    )


def _votes(state: policies.VoteState) -> str:
    rows = (
        (
            markup.esc(v.principal),
            f'<span class="vote {markup.esc(v.vote.value)}">{markup.esc(v.vote.value)}</span>',
            markup.esc(v.reason or ""),
            markup.when(v.voted_at_ms),
        )
        for v in state.votes
    )
    table = markup.table(("principal", "vote", "reason", "at"), rows, empty="No vote yet.")
    return '<h2>Votes</h2><div id="votes">' + table + "</div>"


def _may_vote(state: policies.VoteState, *, pending: bool) -> str:
    if not pending:
        return ""
    if state.may_vote is None:
        who = '<p class="muted">Any approver but the requester.</p>'
    elif state.may_vote:
        who = "<ul>" + "".join(f"<li>{markup.esc(p)}</li>" for p in state.may_vote) + "</ul>"
    else:
        who = '<p class="empty">Nobody left in its groups.</p>'
    return '<h2>Who else may vote</h2><div id="may-vote">' + who + "</div>"


def _forms(approval_id: str, session: sessions.Session, state: policies.VoteState) -> str:
    if not permissions.admits(session.principal, Operation.APPROVE):
        return ""
    mine = [v for v in state.votes if v.principal == session.principal.principal]
    if mine:
        return markup.notice(f"You voted {mine[0].vote.value}: one vote per principal.")
    needed = state.policy is not None and state.policy.reason_required
    reason = markup.text_field(
        "reason",
        "Reason" if needed else "Reason (optional)",
        required=needed,
        maxlength=policies.REASON_MAX,
    )
    action = _page(approval_id) + "/vote"
    return (
        "<h2>Your vote</h2>"
        + markup.post_form(action, session, markup.hidden("vote", "approve") + reason, "Approve…")
        + markup.post_form(
            action, session, markup.hidden("vote", "deny") + reason, "Deny…", danger=True
        )
    )


@guard.view(Operation.READ)
async def detail_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/approvals/{id}`: the request, its policy, votes, voters and expiry."""
    approval_id = _id(request)
    ctx = context.of(request)
    approval, state = await votes.detail(ctx, approval_id)
    pending = approval.status is approvals.ApprovalStatus.PENDING
    expires_in = state.expires_at_ms - ctx.clock.now_ms()
    facts = markup.facts(
        (
            ("status", f'<b id="status">{markup.esc(approval.status.value)}</b>'),
            ("action", markup.esc(approval.action_type)),
            ("project", markup.esc(approval.project_id)),
            ("requested by", markup.esc(approval.requested_principal)),
            ("created", markup.when(approval.created_at_ms)),
            ("expires", markup.when(state.expires_at_ms)),
            ("time to expiry", markup.esc(_remaining(expires_in) if pending else "-")),
            *approval_pages.window_facts(approval.narrowing),
            ("decided by", markup.esc(approval.decided_principal or "-")),
            *resubmit_pages.chain(
                approval.resubmitted_from, await ctx.store.requested_again(approval_id)
            ),
        )
    )
    body = (
        facts
        + (await approval_pages.preview_of(request, approval_id) if pending else "")
        + _policy(state)
        + _votes(state)
        + _may_vote(state, pending=pending)
        + (_forms(approval_id, session, state) if pending else "")
    )
    return guard.html_response(
        markup.document(f"Approval {approval_id}", body, session=session, active="approvals")
    )


@guard.form(Operation.APPROVE)
async def vote(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/approvals/{id}/vote` (`vote`, `reason`, then `confirmed=yes`): the signed-in
    principal's one vote, as `POST /api/v1/approvals/{id}/votes`."""
    approval_id = _id(request)
    body: dict[str, object] = {"vote": fields.get("vote"), "reason": fields.get("reason")}
    choice, _ = votes.choice_of(body)  # a bad field is refused before the confirmation
    if fields.get("confirmed") != "yes":
        ask = guard.Confirm(
            f"Vote {choice.value} on {approval_id} as {session.principal.principal}?",
            "Approve" if choice is approvals.Vote.APPROVE else "Deny",
            _page(approval_id),
            danger=choice is approvals.Vote.DENY,
            extra=await approval_pages.preview_of(request, approval_id),
        )
        return guard.confirmed(request, session, fields, ask) or guard.redirect(_page(approval_id))
    ctx = context.of(request)
    admitted = await guard.admit(request, body)
    voted, consumed = await votes.vote_as(ctx, admitted, approval_id)
    back = markup.link(markup.url(_page(approval_id)), "Back to the request")
    after = f"Your {choice.value} vote on {approval_id} is recorded; it is {voted.status.value}."
    made = ""
    if consumed is not None:
        href = markup.url("/ui/dispatches/" + markup.segment(consumed.dispatch_id))
        made = f'<p>Dispatch <a href="{href}">{markup.esc(consumed.dispatch_id)}</a></p>'
    return guard.html_response(
        markup.document(
            "Voted",
            markup.notice(after, kind="ok") + made + f"<p>{back}</p>",
            session=session,
            active="approvals",
        )
    )


@guard.view(Operation.READ)
async def policies_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/policies`: the policies in force, as `GET /api/v1/policies` reads them."""
    found = await context.of(request).store.policies_in_force()
    table = markup.table(
        (
            "policy",
            "version",
            "action",
            "project",
            "target prefix",
            "approvals",
            "denials",
            "groups",
            "reason",
        ),
        (
            (
                markup.esc(p.name),
                markup.esc(p.version),
                markup.esc(p.action_type),
                markup.esc(p.project_id or "every project"),
                markup.esc(p.target_prefix or "every target"),
                markup.esc(p.approvals_required),
                markup.esc(p.denials_to_reject),
                markup.esc(", ".join(p.approver_groups) or "any approver"),
                "required" if p.reason_required else "optional",
            )
            for p in found
        ),
        empty="No policy is in force: one approver who is not the requester decides.",
    )
    note = (
        '<p class="muted">The schema\'s owner writes policies; each request carries the one '
        "in force when it was made (docs/security.md).</p>"
    )
    return guard.html_response(
        markup.document("Policies", table + note, session=session, active="policies")
    )
