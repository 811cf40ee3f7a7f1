"""The inbox: everything waiting on the signed-in principal, oldest first, each row linking to
the page where it is decided (the same read as `GET /api/v1/inbox`).

The filters are a plain GET form, so the page works without JavaScript; the rows are a list
that wraps, so a narrow screen never scrolls sideways. An operator may tick several
`recovery_required` rows and settle them with one outcome and one reason: each is settled alone
(`web/settling.py`), after a confirmation page, and the answer reports every row. A held
target's row leads to its holder (settling that frees the target); a frozen dispatch's row
offers its lift (`lift_pages`) to an operator who is not its requester.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import errors, inbox, instants, notes, permissions, plans, states
from qinglong_dispatcher.web import context, dead_letters, reads, settling
from qinglong_dispatcher.web import inbox as inbox_reads
from qinglong_dispatcher.web import notes as note_writes
from qinglong_dispatcher.web.ui import guard, lift_pages, live, markup, sessions

Operation = permissions.Operation

_KIND = {
    inbox.Kind.APPROVAL: "approval",
    inbox.Kind.RECOVERY: "recovery required",
    inbox.Kind.DEAD_LETTER: "notification not delivered",
    inbox.Kind.HELD_TARGET: "target held",
    inbox.Kind.FROZEN_DISPATCH: "frozen",
}
_PAGE = {
    inbox.Kind.APPROVAL: "/ui/approvals/",
    inbox.Kind.RECOVERY: "/ui/dispatches/",
    inbox.Kind.HELD_TARGET: "/ui/dispatches/",
    inbox.Kind.FROZEN_DISPATCH: "/ui/dispatches/",
}
PICK = "pick-"
"""A ticked row's field name is `pick-<dispatch id>` (a form keeps one value per name)."""


def age(ms: int) -> str:
    """A wait's length in words (`3 d 4 h`, `2 h 05 min`, `7 min`, `under a minute`)."""
    minutes = max(0, ms) // 60_000
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min" if minutes else "under a minute"


def _filters(wanted: inbox.Filter) -> str:
    older = "" if wanted.older_than_ms is None else instants.duration(wanted.older_than_ms)
    fields = (
        markup.text_field("action", "Action", value=wanted.action_type or "", required=False)
        + markup.text_field("project", "Project", value=wanted.project_id or "", required=False)
        + markup.text_field(
            "target", "Target prefix", value=wanted.target_prefix or "", required=False
        )
        + markup.text_field(
            "older_than", "Older than (90s, 30m, 4h, 2d)", value=older, required=False
        )
        + markup.text_field(
            "q", "Text", value=wanted.text or "", required=False, maxlength=inbox_reads.TEXT_MAX
        )
        + markup.select(
            "sort",
            "Order",
            inbox_reads.SORTS,
            chosen="newest" if wanted.newest_first else "oldest",
        )
    )
    return (
        f'<form class="filters" method="get" action="/ui/inbox" role="search">{fields}'
        '<button type="submit">Filter</button> <a href="/ui/inbox">Clear</a></form>'
    )


def notes_list(written: list[notes.Note]) -> str:
    """The notes on a row, oldest first (each with who wrote it and when)."""
    if not written:
        return ""
    items = "".join(
        f"<li>{markup.esc(n.note)} <small>— {markup.esc(n.principal)}, "
        f"{markup.when(n.written_at_ms)}</small></li>"
        for n in written
    )
    return f'<ul class="notes">{items}</ul>'


def note_fields(subject_id: str, form_id: str | None = None) -> str:
    """A note's text field and button; with `form_id`, they belong to that form (placed
    elsewhere: the inbox's rows sit inside the bulk settle form, and forms do not nest)."""
    owner = "" if form_id is None else f' form="{markup.esc(form_id)}"'
    said = markup.esc(f"note on {subject_id}")
    return (
        f'<span class="note-form"><input type="text" name="note" maxlength="{notes.MAX_CHARS}"'
        f' required aria-label="{said}"{owner}>'
        f'<button type="submit"{owner}>Add note</button></span>'
    )


def note_form(subject: notes.Subject, subject_id: str, session: sessions.Session) -> str:
    """A whole note form (the dispatch and request pages); empty for a viewer."""
    if not permissions.admits(session.principal, Operation.NOTE):
        return ""
    return (
        f'<form method="post" action="/ui/inbox/note">{markup.hidden("csrf", session.csrf)}'
        + markup.hidden("subject", subject.value)
        + markup.hidden("id", subject_id)
        + note_fields(subject_id)
        + "</form>"
    )


def _note_target(index: int, item: inbox.Item, session: sessions.Session) -> str:
    subject = notes.Subject.APPROVAL if item.kind is inbox.Kind.APPROVAL else notes.Subject.DISPATCH
    return (
        f'<form id="note-{index}" method="post" action="/ui/inbox/note">'
        + markup.hidden("csrf", session.csrf)
        + markup.hidden("subject", subject.value)
        + markup.hidden("id", item.subject_id)
        + markup.hidden("back", "inbox")
        + "</form>"
    )


def _waits(item: inbox.Item, session: sessions.Session) -> str:
    """A held target's count and a frozen dispatch's freeze, with the lift when the viewer may
    (an operator, not the requester: the database decides again)."""
    if item.kind is inbox.Kind.HELD_TARGET:
        return f'<span class="wait">{markup.esc(item.waiting)} waiting on it</span>'
    if item.freeze is None:
        return ""
    shown = (
        f'<span class="wait">frozen_by {markup.esc(item.freeze.freeze_id)} until '
        f"{markup.when(item.freeze.until_ms)}</span>"
    )
    if permissions.admits(session.principal, Operation.LIFT) and (
        item.requested_by != session.principal.principal
    ):
        href = markup.url(lift_pages.path(item.subject_id))
        shown += f' <a class="lift" href="{href}">Lift for this dispatch…</a>'
    return shown


def _row(
    item: inbox.Item,
    now_ms: int,
    session: sessions.Session,
    *,
    pickable: bool = False,
    written: list[notes.Note] | None = None,
    note_form_id: str | None = None,
) -> str:
    segment = markup.segment(item.subject_id)
    path = _PAGE[item.kind] + segment if item.kind in _PAGE else dead_letters.page(segment)
    href = markup.url(path)
    pick = ""
    if pickable and item.kind is inbox.Kind.RECOVERY:
        name = markup.esc(PICK + item.subject_id)
        said = markup.esc(f"select {item.subject_id}")
        pick = f'<input type="checkbox" name="{name}" value="yes" aria-label="{said}"> '
    return (
        f'<li class="item {markup.esc(item.kind.value)}">{pick}'
        f'<span class="kind">{markup.esc(_KIND[item.kind])}</span> '
        f"<b>{markup.link(href, item.subject_id)}</b>"
        f'<span class="what">{markup.esc(item.action_type)} · {markup.esc(item.project_id)}'
        + ("" if item.target is None else f" · target {markup.esc(item.target)}")
        + f" · waiting {markup.esc(age(now_ms - item.since_ms))} (since "
        f"{markup.when(item.since_ms)})</span>"
        f'<span class="summary">{markup.esc(item.summary)}</span>'
        + _waits(item, session)
        + notes_list(written or [])
        + ("" if note_form_id is None else note_fields(item.subject_id, note_form_id))
        + "</li>"
    )


def _offered(session: sessions.Session) -> str:
    offered = [
        text
        for operation, text in (
            (Operation.APPROVE, "approval requests you may vote on"),
            (
                Operation.RESOLVE,
                "dispatches whose outcome is unknown, to settle, the targets they hold, "
                "dispatches a freeze holds, and notifications not delivered",
            ),
        )
        if permissions.admits(session.principal, operation)
    ]
    if not offered:
        return '<p class="muted">Nothing waits on a viewer: your role decides nothing.</p>'
    return f'<p class="muted">Shown: {markup.esc(" and ".join(offered))}.</p>'


@guard.view(Operation.READ)
async def page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/inbox?action=&project=&target=&older_than=&q=&sort=`: what waits on the
    signed-in principal."""
    reads.only_params(request, inbox_reads.PARAMS)
    wanted = inbox_reads.filter_of(dict(request.query))
    ctx = context.of(request)
    found = await inbox_reads.read(ctx, session.principal, wanted)
    now_ms = ctx.clock.now_ms()
    settles = permissions.admits(session.principal, Operation.RESOLVE) and any(
        item.kind is inbox.Kind.RECOVERY for item in found.items
    )
    writes = permissions.admits(session.principal, Operation.NOTE)
    rows = "".join(
        _row(
            item,
            now_ms,
            session,
            pickable=settles,
            written=found.notes_on(item),
            note_form_id=f"note-{index}" if writes and inbox_reads.notes_kept(item) else None,
        )
        for index, item in enumerate(found.items)
    )
    targets = (
        "".join(
            _note_target(i, item, session)
            for i, item in enumerate(found.items)
            if inbox_reads.notes_kept(item)
        )
        if writes
        else ""
    )
    listed = (
        f'<ul class="inbox" id="inbox">{rows}</ul>'
        if rows
        else '<p class="empty" id="inbox">Nothing waits on you.</p>'
    )
    if settles:
        listed = _bulk_form(listed, session)
    partial = (
        ""
        if found.complete
        else markup.notice("More rows wait than one page reads: narrow the filters.")
    )
    body = _offered(session) + _filters(wanted) + partial + listed + targets + live.MARKER
    return guard.html_response(markup.document("Inbox", body, session=session, active="inbox"))


def _bulk_form(listed: str, session: sessions.Session) -> str:
    """The list inside one form: tick `recovery_required` rows, then one outcome and reason."""
    return markup.post_form(
        "/ui/inbox/settle",
        session,
        listed
        + '<fieldset class="bulk"><legend>Settle the selected rows</legend>'
        # No outcome is chosen for the operator: a default would settle by a slip.
        + markup.select("as", "As", [c.value for c in states.Completion], prompt="choose…")
        + markup.text_field("reason", "Reason code", pattern=markup.CODE_PATTERN)
        + markup.comment_field()
        + "</fieldset>",
        "Settle selected…",
        danger=True,
    )


def _picked(fields: dict[str, str]) -> list[str]:
    picked = [name[len(PICK) :] for name in fields if name.startswith(PICK)]
    if not picked:
        raise errors.InvalidInput("dispatch_ids: select at least one row")
    if not all(plans.is_identifier(p) for p in picked):
        raise errors.InvalidInput("dispatch_ids: each must be a dispatch id")
    return picked


def _results(done: list[settling.Settled]) -> str:
    rows = [
        (
            markup.link(
                markup.url("/ui/dispatches/" + markup.segment(r.dispatch_id)), r.dispatch_id
            ),
            markup.esc("settled" if r.problem is None else "refused"),
            markup.esc(r.status if r.problem is None else f"{r.problem}: {r.detail}"),
        )
        for r in done
    ]
    return markup.table(("dispatch", "outcome", "status or why"), rows, empty="No row.")


@guard.form(Operation.RESOLVE)
async def settle(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/inbox/settle` (`pick-<id>`…, `as`, `reason`, `comment`, then `confirmed=yes`):
    each ticked row settled alone, as `POST /api/v1/recovery/settle`; the page reports each."""
    picked = settling.dispatch_ids(_picked(fields))
    outcome = fields.get("as", "")
    named = f" as {outcome}" if outcome in {c.value for c in states.Completion} else ""
    ask = guard.Confirm(
        f"Settle {len(picked)} dispatch(es){named} by hand, each alone? This is final and "
        "audited under your name.",
        "Settle",
        "/ui/inbox",
        danger=True,
        extra="<ul>" + "".join(f"<li>{markup.esc(p)}</li>" for p in picked) + "</ul>",
    )
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    admitted = await guard.admit(
        request,
        {"as": fields.get("as"), "reason": fields.get("reason"), "comment": fields.get("comment")},
    )
    done = await settling.settle_each(context.of(request), admitted, picked)
    settled = sum(1 for r in done if r.problem is None)
    kind = "ok" if settled == len(done) else "error"
    body = (
        markup.notice(f"Settled {settled} of {len(done)}.", kind=kind)
        + _results(done)
        + '<p><a href="/ui/inbox">The inbox</a></p>'
    )
    return guard.html_response(markup.document("Settled", body, session=session, active="inbox"))


@guard.form(Operation.NOTE)
async def write_note(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/inbox/note` (`subject`, `id`, `note`, `back`): a note as the signed-in
    principal, as `POST /api/v1/inbox/notes`; then back to the inbox or the row's page."""
    admitted = await guard.admit(
        request,
        {"subject": fields.get("subject"), "id": fields.get("id"), "note": fields.get("note")},
    )
    written = await note_writes.note_as(context.of(request), admitted)
    if fields.get("back") == "inbox":
        return guard.redirect("/ui/inbox")
    page = _PAGE[
        inbox.Kind.APPROVAL if written.subject is notes.Subject.APPROVAL else inbox.Kind.RECOVERY
    ]
    return guard.redirect(page + markup.segment(written.subject_id))
