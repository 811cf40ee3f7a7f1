"""The dispatches pages: a filtered keyset list, and one dispatch with its ledger as a timeline,
its receipt, its Run, its plan's redacted preview and its audit (what the API's reads read)."""

from __future__ import annotations

import dataclasses
from typing import Final

from aiohttp import web

from qinglong_dispatcher.domain import (
    dispatch_views,
    errors,
    notes,
    permissions,
    plans,
    states,
    targets,
    uncertainty,
    waits,
)
from qinglong_dispatcher.web import context, operations, problems, reads
from qinglong_dispatcher.web.ui import (
    evidence,
    guard,
    inbox_pages,
    lift_pages,
    live,
    markup,
    paging,
    resubmit_pages,
    sessions,
)

_WAITING = (states.EffectiveStatus.PENDING, states.EffectiveStatus.RETRY_WAIT)
_WAIT_WORDS = {targets.TargetWaitKind.HELD: "held by", targets.TargetWaitKind.BUSY: "busy by"}


def _target(target: str | None, wait: targets.TargetWait | None) -> str:
    """The target, and why the dispatch waits for it with a link to the dispatch that has it:
    `router-1 · waiting for target (held by D)`."""
    if target is None:
        return ""
    if wait is None:
        return markup.esc(target)
    holder = markup.link(
        markup.url("/ui/dispatches/" + markup.segment(wait.by_dispatch_id)), wait.by_dispatch_id
    )
    return (
        f"{markup.esc(target)} · "
        f'<span class="waiting-for-target">waiting for target ({_WAIT_WORDS[wait.kind]} '
        f"{holder})</span>"
    )


def _window(window: waits.Window | None, wait: waits.Wait | None) -> str:
    """The execution window, and why the dispatch waits besides its target: `frozen by
    freeze F` or `not before T`."""
    shown = (
        "-"
        if window is None
        else f"{markup.when(window.not_before_ms)} … {markup.when(window.not_after_ms)}"
    )
    if wait is None:
        return shown
    why = (
        f"frozen by freeze {wait.freeze_id}"
        if wait.freeze_id is not None
        else f"not before {markup.when(wait.not_before_ms)}"
    )
    return f'{shown} · <span class="waiting-for-window">{markup.esc(why)}</span>'


_OWN: Final = (
    ("target", "Target", markup.CODE_PATTERN),
    ("from", "Created from (UTC)", None),
    ("to", "Created before (UTC)", None),
)
"""The dispatch list's own filters, beside the shared ones (`paging`)."""


def _filters(status: str | None, shown: dict[str, object]) -> str:
    options = ("", *(s.value for s in states.EffectiveStatus))
    items = "".join(
        f'<option value="{markup.esc(o)}"{" selected" if o == (status or "") else ""}>'
        f"{markup.esc(o or 'any state')}</option>"
        for o in options
    )
    return (
        '<form method="get" action="/ui/dispatches"><label>State '
        f'<select name="status">{items}</select></label>{paging.fields(shown)}'
        + "".join(
            markup.text_field(
                name,
                label,
                value=str(shown.get(name) or ""),
                pattern=pattern,
                required=False,
            )
            for name, label, pattern in _OWN
        )
        + '<button type="submit">Filter</button></form>'
    )


@guard.view(guard.Operation.READ)
async def list_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/dispatches?status=&action=&project=&limit=&after=&trail=`: newest first, a
    page at a time, both ways (the API's filters)."""
    reads.only_params(request, ("status", *(name for name, _, _ in _OWN), *paging.PARAMS))
    q = request.query
    text = q.get("status") or None
    status = reads.query_field("status", text, states.EffectiveStatus)
    shown = paging.filters(q, dispatch_views.MAX_LIMIT)
    own = {name: q.get(name) or None for name, _, _ in _OWN}
    target = reads.query_field("target", own["target"], reads.identifier("target"))
    from_ms = reads.query_field("from", own["from"], paging.parse_instant("from"))
    to_ms = reads.query_field("to", own["to"], paging.parse_instant("to"))
    if from_ms is not None and to_ms is not None and from_ms >= to_ms:
        raise problems.BadField("to", "to: must be after from")
    after = reads.query_field("after", q.get("after") or None, dispatch_views.Cursor.parse)
    trail = reads.query_field(
        "trail", q.get("trail") or None, paging.parse_trail(dispatch_views.Cursor.parse)
    )
    ctx = context.of(request)
    now_ms = ctx.clock.now_ms()
    page = await ctx.store.list_dispatches(
        dispatch_views.ListQuery(
            status=status,
            action_type=shown.action,
            project_id=shown.project,
            limit=shown.limit or dispatch_views.DEFAULT_LIMIT,
            after=after,
            target=target,
            from_ms=from_ms,
            to_ms=to_ms,
        ),
        now_ms=now_ms,
    )
    rows = [
        (
            markup.link(
                markup.url("/ui/dispatches/" + markup.segment(d.dispatch_id)), d.dispatch_id
            ),
            markup.esc(d.status.value),
            markup.esc(d.action_type),
            markup.esc(d.project_id),
            _target(d.target, d.waiting),
            markup.esc(f"{d.attempt}/{d.max_attempts}"),
            markup.ago(d.created_at_ms, now_ms),
            markup.esc(d.result_code or ""),
        )
        for d in page.dispatches
    ]
    more = paging.links(
        "/ui/dispatches",
        {"status": text, **shown.as_query(), **own},
        after=q.get("after") or None,
        trail=trail,
        next_cursor=None if page.next is None else str(page.next),
    )
    body = (
        _filters(text, {**shown.as_query(), **own})
        + markup.table(
            ("dispatch", "state", "action", "project", "target", "attempt", "created", "result"),
            rows,
            empty="No dispatch matches.",
        )
        + more
        + live.MARKER
    )
    return guard.html_response(
        markup.document("Dispatches", body, session=session, active="dispatches")
    )


def _timeline(detail: dispatch_views.Detail) -> str:
    items = "".join(
        "<li>"
        + markup.when(e.committed_at_ms)
        + " · v"
        + markup.esc(e.version)
        + " · "
        + markup.esc(e.from_status.value if e.from_status else "∅")
        + " → <b>"
        + markup.esc(e.to_status.value)
        + "</b> · attempt "
        + markup.esc(e.attempt)
        + ("" if e.by is None else " · " + markup.esc(e.by))
        + ("" if e.result_code is None else " · " + markup.esc(e.result_code))
        + ("" if e.settled_by is None else " · settled by " + markup.esc(e.settled_by))
        + ("" if e.noticed_by is None else " · noticed by " + markup.esc(e.noticed_by))
        + "</li>"
        for e in detail.events
    )
    return f'<ol class="timeline">{items}</ol>' if items else '<p class="empty">No events.</p>'


def _operator_forms(detail: dispatch_views.Detail, session: sessions.Session) -> str:
    if not permissions.admits(session.principal, guard.Operation.CANCEL):
        return ""
    status = detail.execution.effective_status
    dispatch_id = markup.segment(detail.dispatch.dispatch_id)
    if status in _WAITING:
        frozen = detail.execution.wait is not None and detail.execution.wait.freeze_id
        lift = (
            f'<p><a class="lift" href="{markup.url(lift_pages.path(detail.dispatch.dispatch_id))}">'
            "Lift the freeze for this dispatch…</a></p>"
            if frozen and permissions.admits(session.principal, guard.Operation.LIFT)
            else ""
        )
        return (
            lift
            + "<h2>Cancel</h2>"
            + markup.post_form(
                f"/ui/dispatches/{dispatch_id}/cancel",
                session,
                markup.text_field("reason", "Reason code", pattern=markup.CODE_PATTERN),
                "Cancel…",
                danger=True,
            )
        )
    return ""  # a recovery_required row's settle form sits beside its evidence


@guard.view(guard.Operation.READ)
async def detail_page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/dispatches/{dispatch_id}`: what `dispatch show` prints, as a page."""
    reads.only_params(request, ())
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    ctx = context.of(request)
    detail = await ctx.store.show_dispatch(dispatch_id, now_ms=ctx.clock.now_ms(), shown=ctx.shown)
    if detail is None:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    d, x = detail.dispatch, detail.execution
    audit_href = markup.url("/ui/audit", subject=d.dispatch_id)
    facts = markup.facts(
        (
            ("state", f"<b>{markup.esc(x.effective_status.value)}</b>"),
            ("action", markup.esc(d.action_type)),
            ("project", markup.esc(d.project_id)),
            ("target", _target(d.target, x.waiting_for_target) or "-"),
            ("window", _window(x.window, x.wait)),
            ("action ref", markup.esc(d.action_ref)),
            ("approval request", markup.esc(d.approval_request_id)),
            ("approved by", markup.esc(d.approved_by)),
            ("action digest", f"<code>{markup.esc(d.action_digest)}</code>"),
            ("attempt", markup.esc(f"{x.attempt}/{x.max_attempts}")),
            ("takeovers", markup.esc(f"{x.takeovers}/{x.max_takeovers}")),
            ("result", markup.esc(x.result_code or "-")),
            ("Run", markup.esc(detail.run_id or "-")),
            ("created", markup.when(d.created_at_ms)),
            ("updated", markup.when(x.updated_at_ms)),
            ("audit", f'<a href="{audit_href}">security audit of this dispatch</a>'),
            *resubmit_pages.chain(detail.resubmitted_from, detail.requested_again),
        )
    )
    receipt: object = None
    if detail.receipt is not None:
        receipt = dataclasses.asdict(detail.receipt)
    elif x.receipt is not None:
        receipt = dict(x.receipt)
    written = await context.of(request).store.notes_for([], [d.dispatch_id])
    body = (
        facts
        + evidence.section(detail, session)  # first: it is what the operator decides on
        + "<h2>Notes</h2>"
        + (inbox_pages.notes_list(written) or '<p class="empty">No note yet.</p>')
        + inbox_pages.note_form(notes.Subject.DISPATCH, d.dispatch_id, session)
        + "<h2>Timeline (ledger)</h2>"
        + _timeline(detail)
        + "<h2>Plan (redacted preview)</h2>"
        + markup.preview(detail.plan, detail.plan_code)
        + "<h2>Receipt</h2>"
        + (
            '<p class="empty">No receipt: one is written only with a completion.</p>'
            if receipt is None
            else markup.json_block(receipt)
        )
        + _observation(detail)
        + _operator_forms(detail, session)
        + resubmit_pages.section(detail, session)
    )
    return guard.html_response(
        markup.document(f"Dispatch {d.dispatch_id}", body, session=session, active="dispatches")
    )


def _observation(detail: dispatch_views.Detail) -> str:
    parts = []
    if detail.observation is not None:
        o = detail.observation
        parts.append(
            "<h2>Last reconcile</h2>"
            + markup.facts(
                (
                    ("verdict", markup.esc(uncertainty.observation_verdict(o))),
                    ("code", markup.esc(f"{o.outcome.value}/{o.reason_code}")),
                    ("count", markup.esc(o.count)),
                    ("at", markup.when(o.last_seen_at_ms)),
                )
            )
        )
    if detail.resolution is not None:
        r = detail.resolution
        parts.append(
            "<h2>Resolution</h2>"
            + markup.facts(
                (
                    ("as", markup.esc(r.resolution.value)),
                    ("source", markup.esc(r.source.value)),
                    ("by", markup.esc(r.principal or r.resolved_by)),
                    ("reason", markup.esc(r.reason_code)),
                    ("at", markup.when(r.committed_at_ms)),
                )
            )
        )
    return "".join(parts)


@guard.form(guard.Operation.CANCEL)
async def cancel(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/dispatches/{dispatch_id}/cancel` (`reason`, then `confirmed=yes`)."""
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    back = "/ui/dispatches/" + markup.segment(dispatch_id)
    ask = guard.Confirm(f"Cancel dispatch {dispatch_id}?", "Cancel it", back, danger=True)
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    admitted = await guard.admit(request, {"reason": fields.get("reason")})
    await operations.cancel_as(context.of(request), admitted, dispatch_id)
    return guard.redirect(back)
