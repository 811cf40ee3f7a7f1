"""The inbox: everything waiting on the signed-in principal, oldest first, each row linking to
the page where it is decided (the same read as `GET /api/v1/inbox`).

The filters are a plain GET form, so the page works without JavaScript; the rows are a list
that wraps, so a narrow screen never scrolls sideways.
"""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import inbox, permissions
from qinglong_dispatcher.web import context, dead_letters, reads
from qinglong_dispatcher.web import inbox as inbox_reads
from qinglong_dispatcher.web.ui import guard, markup, sessions

Operation = permissions.Operation

_KIND = {
    inbox.Kind.APPROVAL: "approval",
    inbox.Kind.RECOVERY: "recovery required",
    inbox.Kind.DEAD_LETTER: "notification not delivered",
}
_PAGE = {inbox.Kind.APPROVAL: "/ui/approvals/", inbox.Kind.RECOVERY: "/ui/dispatches/"}


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
    fields = (
        markup.text_field("action", "Action", value=wanted.action_type or "", required=False)
        + markup.text_field("project", "Project", value=wanted.project_id or "", required=False)
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


def _row(item: inbox.Item, now_ms: int) -> str:
    segment = markup.segment(item.subject_id)
    path = _PAGE[item.kind] + segment if item.kind in _PAGE else dead_letters.page(segment)
    href = markup.url(path)
    return (
        f'<li class="item {markup.esc(item.kind.value)}">'
        f'<span class="kind">{markup.esc(_KIND[item.kind])}</span> '
        f"<b>{markup.link(href, item.subject_id)}</b>"
        f'<span class="what">{markup.esc(item.action_type)} · {markup.esc(item.project_id)}'
        f" · waiting {markup.esc(age(now_ms - item.since_ms))} (since "
        f"{markup.when(item.since_ms)})</span>"
        f'<span class="summary">{markup.esc(item.summary)}</span></li>'
    )


def _offered(session: sessions.Session) -> str:
    offered = [
        text
        for operation, text in (
            (Operation.APPROVE, "approval requests you may vote on"),
            (
                Operation.RESOLVE,
                "dispatches whose outcome is unknown, to settle, and notifications not delivered",
            ),
        )
        if permissions.admits(session.principal, operation)
    ]
    if not offered:
        return '<p class="muted">Nothing waits on a viewer: your role decides nothing.</p>'
    return f'<p class="muted">Shown: {markup.esc(" and ".join(offered))}.</p>'


@guard.view(Operation.READ)
async def page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/inbox?action=&project=&q=&sort=`: what waits on the signed-in principal."""
    reads.only_params(request, inbox_reads.PARAMS)
    wanted = inbox_reads.filter_of(dict(request.query))
    ctx = context.of(request)
    found = await inbox_reads.read(ctx, session.principal, wanted)
    now_ms = ctx.clock.now_ms()
    rows = "".join(_row(item, now_ms) for item in found.items)
    listed = (
        f'<ul class="inbox" id="inbox">{rows}</ul>'
        if rows
        else '<p class="empty" id="inbox">Nothing waits on you.</p>'
    )
    partial = (
        ""
        if found.complete
        else markup.notice("More rows wait than one page reads: narrow the filters.")
    )
    body = _offered(session) + _filters(wanted) + partial + listed
    return guard.html_response(markup.document("Inbox", body, session=session, active="inbox"))
