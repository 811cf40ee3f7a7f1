"""The approvals pages: the waiting queue with each plan's redacted preview, approve and reject
(each behind a confirmation step), and a form to request a new action.

Every decision is made by the store acting as the signed-in principal (`guard.admit`, the API's
own admission), so the database decides: a self-approval it refuses is shown with its message.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import approval_views, errors, permissions, plans, waits
from qinglong_dispatcher.usecases import requesting
from qinglong_dispatcher.web import approvals, bodies, context, reads, submits
from qinglong_dispatcher.web.ui import guard, live, markup, paging, sessions

Operation = permissions.Operation
_SCANNED_PAGES = 4
"""A confirmation page looks for its request's preview in this many pages of the queue."""


def _id(request: web.Request) -> str:
    value = request.match_info["approval_request_id"]
    if not plans.is_identifier(value):
        raise errors.ApprovalNotFound("no such id (not an id)")
    return value


def _decisions(row: approval_views.WaitingApproval, session: sessions.Session) -> str:
    if not permissions.admits(session.principal, Operation.APPROVE):
        return ""
    base = "/ui/approvals/" + markup.segment(row.approval_request_id)
    return markup.post_form(
        base + "/approve", session, markup.comment_field(), "Approve…"
    ) + markup.post_form(
        base + "/reject",
        session,
        markup.text_field("reason", "Reason code", pattern=markup.CODE_PATTERN)
        + markup.comment_field(),
        "Reject…",
        danger=True,
    )


def _decided(row: approval_views.WaitingApproval, now_ms: int) -> list[tuple[str, str]]:
    if row.status == approval_views.WAITING:
        return []
    decided = [("status", markup.esc(row.status))]
    if row.decided_by is not None:
        decider = f"{row.decided_principal or '-'} ({row.decided_by})"
        decided += [
            ("decided by", markup.esc(decider)),
            ("why", markup.esc(row.decision_code or "-")),
            ("decided", markup.ago(row.decided_at_ms, now_ms)),
        ]
    if row.consumed_at_ms is not None:
        decided.append(("consumed", markup.ago(row.consumed_at_ms, now_ms)))
    decided += [
        (f"{said.decision} by {said.principal}", markup.esc(approval_views.reason_text(said)))
        for said in row.reasons
    ]
    return decided


def window_facts(narrowing: waits.Narrowing) -> list[tuple[str, str]]:
    """The requester's narrowing of the window, a fact of its own when it narrows anything:
    what the approvers approve with the request."""
    text = narrowing.text()
    return [] if text is None else [("window", markup.esc(text))]


def _row(row: approval_views.WaitingApproval, session: sessions.Session, now_ms: int) -> str:
    href = markup.url("/ui/approvals/" + markup.segment(row.approval_request_id))
    facts = markup.facts(
        (
            ("action", markup.esc(row.action_type)),
            ("project", markup.esc(row.project_id)),
            ("requested by", markup.esc(row.requested_principal)),
            ("created", markup.ago(row.created_at_ms, now_ms)),
            ("expires", markup.ago(row.expires_at_ms, now_ms)),
            *window_facts(row.narrowing),
            *_decided(row, now_ms),
            ("action digest", f"<code>{markup.esc(row.action_digest)}</code>"),
        )
    )
    waiting = row.status == approval_views.WAITING
    return (
        f'<section class="approval"><h2>{markup.link(href, row.approval_request_id)}</h2>'
        + facts
        + markup.preview(row.plan, row.plan_code)
        + (_decisions(row, session) if waiting else "")
        + "</section>"
    )


def _status_filter(status: str, shown: paging.Filters, given: dict[str, object]) -> str:
    """A GET form choosing the status and the filters shown (no JavaScript needed)."""
    return (
        f'<form class="filter" method="get" action="{markup.url("/ui/approvals")}">'
        + markup.select("status", "Status", approval_views.STATUSES, chosen=status)
        + paging.fields(shown.as_query())
        + paging.range_fields(given)
        + '<button type="submit">Show</button></form>'
    )


@guard.view(Operation.READ)
async def queue(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/approvals?status=&action=&project=&from=&to=&limit=&after=&trail=`: requests
    of one status (the waiting ones by default), newest first, a page at a time both ways, each
    time also as how long ago."""
    reads.only_params(request, ("status", *paging.RANGE, *paging.PARAMS))
    shown = paging.filters(request.query, approval_views.MAX_LIMIT)
    given, from_ms, to_ms = paging.time_range(request.query)
    after = reads.query_field(
        "after", request.query.get("after") or None, approval_views.Cursor.parse
    )
    trail = reads.query_field(
        "trail",
        request.query.get("trail") or None,
        paging.parse_trail(approval_views.Cursor.parse),
    )
    status = reads.query_field(
        "status", request.query.get("status") or None, approval_views.parse_status
    )
    status = status or approval_views.WAITING
    ctx = context.of(request)
    now_ms = ctx.clock.now_ms()
    page = await ctx.store.list_waiting_approvals(
        approval_views.ListQuery(
            action_type=shown.action,
            project_id=shown.project,
            limit=shown.limit or approval_views.DEFAULT_LIMIT,
            after=after,
            status=status,
            from_ms=from_ms,
            to_ms=to_ms,
        ),
        now_ms=now_ms,
        shown=ctx.shown,
    )
    new = ""
    if permissions.admits(session.principal, Operation.CREATE):
        new = f'<p><a href="{markup.url("/ui/approvals/new")}">Request an action…</a></p>'
    more = paging.links(
        "/ui/approvals",
        {
            "status": None if status == approval_views.WAITING else status,
            **shown.as_query(),
            **given,
        },
        after=request.query.get("after") or None,
        trail=trail,
        next_cursor=None if page.next is None else str(page.next),
    )
    rows = "".join(_row(row, session, now_ms) for row in page.approvals)
    empty = (
        "Nothing waits for a decision."
        if status == approval_views.WAITING
        else f"No {status} requests."
    )
    body = (
        new
        + _status_filter(status, shown, given)
        + (rows or f'<p class="empty">{empty}</p>')
        + more
        + live.MARKER
    )
    return guard.html_response(
        markup.document("Approvals", body, session=session, active="approvals")
    )


def _types(ctx: context.Context) -> list[str]:
    known = set(requesting.CORE_PLAN_MODELS)
    if ctx.plan_models is not None:
        known |= set(ctx.plan_models())
    return sorted(known)


def _new_form(ctx: context.Context, session: sessions.Session, fields: dict[str, str]) -> str:
    return markup.post_form(
        "/ui/approvals/new",
        session,
        markup.select("action", "Action", _types(ctx), chosen=fields.get("action"))
        + '<label>Plan (JSON) <textarea name="plan" required spellcheck="false">'
        + markup.esc(fields.get("plan", ""))
        + "</textarea></label>",
        "Request approval",
    ).replace('<form method="post"', '<form class="stack" method="post"', 1)


@guard.view(Operation.CREATE)
async def new_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/approvals/new`: the form."""
    ctx = context.of(request)
    body = (
        _new_form(ctx, session, {})
        + '<p class="muted">The plan must have the exact shape of its version'
        " (<code>docs/actions.md</code>); you are its requester.</p>"
    )
    return guard.html_response(
        markup.document("Request an action", body, session=session, active="approvals")
    )


@guard.form(Operation.CREATE)
async def submit(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/approvals/new` (`action`, `plan`): the plan and its pending request."""
    plan = bodies.parse_json(fields.get("plan", ""), "plan")
    ctx = context.of(request)
    admitted = await guard.admit(request, {"action": fields.get("action"), "plan": plan})
    created = await submits.create_as(ctx, admitted)
    body = markup.notice(
        f"Approval request {created.approval_request_id} waits for an approver.", kind="ok"
    ) + markup.json_block(approvals.approval_json(created))
    return guard.html_response(
        markup.document("Requested", body, session=session, active="approvals"), status=201
    )


async def preview_of(request: web.Request, approval_id: str) -> str:
    """The request's redacted preview (a confirmation page's, the request's page), when it
    still waits."""
    ctx = context.of(request)
    after = approval_views.NEWEST
    for _ in range(_SCANNED_PAGES):
        page = await ctx.store.list_waiting_approvals(
            approval_views.ListQuery(limit=approval_views.MAX_LIMIT, after=after),
            now_ms=ctx.clock.now_ms(),
            shown=ctx.shown,
        )
        for row in page.approvals:
            if row.approval_request_id == approval_id:
                return markup.preview(row.plan, row.plan_code)
        if page.next is None:
            break
        after = page.next
    return '<p class="empty">Not among the waiting requests.</p>'


@guard.form(Operation.APPROVE)
async def approve(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/approvals/{id}/approve` (then `confirmed=yes`): approve as the principal and
    consume into the dispatch, as `POST /api/v1/approvals/{id}/approve`."""
    approval_id = _id(request)
    if fields.get("confirmed") != "yes":
        ask = guard.Confirm(
            f"Approve {approval_id} as {session.principal.principal}? It becomes a dispatch.",
            "Approve",
            "/ui/approvals",
            extra=await preview_of(request, approval_id),
        )
        return guard.confirmed(request, session, fields, ask) or guard.redirect("/ui/approvals")
    admitted = await guard.admit(request, {"comment": fields.get("comment")})
    _, consumed = await approvals.approve_as(context.of(request), admitted, approval_id)
    href = markup.url("/ui/dispatches/" + markup.segment(consumed.dispatch_id))
    body = markup.notice(f"Approved {approval_id}.", kind="ok") + (
        f'<p>Dispatch <a href="{href}">{markup.esc(consumed.dispatch_id)}</a></p>'
    )
    return guard.html_response(
        markup.document("Approved", body, session=session, active="approvals")
    )


@guard.form(Operation.REJECT)
async def reject(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/approvals/{id}/reject` (`reason`, then `confirmed=yes`)."""
    approval_id = _id(request)
    if fields.get("confirmed") != "yes":
        ask = guard.Confirm(
            f"Reject {approval_id}? It can never be approved.",
            "Reject",
            "/ui/approvals",
            danger=True,
            extra=await preview_of(request, approval_id),
        )
        return guard.confirmed(request, session, fields, ask) or guard.redirect("/ui/approvals")
    admitted = await guard.admit(
        request, {"reason": fields.get("reason"), "comment": fields.get("comment")}
    )
    rejected = await approvals.reject_as(context.of(request), admitted, approval_id)
    body = markup.notice(f"Rejected {approval_id}.", kind="ok") + markup.json_block(
        approvals.approval_json(rejected)
    )
    return guard.html_response(
        markup.document("Rejected", body, session=session, active="approvals")
    )
