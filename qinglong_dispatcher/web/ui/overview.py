"""The overview page: executions by state, the due backlog, the oldest due, the recovery queue
(what `GET /api/v1/status` reads)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import states
from qinglong_dispatcher.web import context
from qinglong_dispatcher.web.ui import guard, markup, sessions


def _card(label: str, value: str, href: str | None = None) -> str:
    shown = value if href is None else f'<a href="{href}">{value}</a>'
    return f'<div class="card"><b>{shown}</b>{markup.esc(label)}</div>'


@guard.view(guard.Operation.READ)
async def overview(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui`: the counts."""
    ctx = context.of(request)
    now = ctx.clock.now_ms()
    counts = await ctx.store.counts(now_ms=now)
    queue = counts.executions.get(states.EffectiveStatus.RECOVERY_REQUIRED, 0)
    oldest = (counts.oldest_due_age_ms or 0) / 1000
    cards = "".join(
        _card(
            status.value,
            markup.esc(counts.executions.get(status, 0)),
            markup.url("/ui/dispatches", status=status.value),
        )
        for status in states.EffectiveStatus
    )
    body = (
        '<h2>Backlog</h2><div class="cards">'
        + _card("due now", markup.esc(counts.due))
        + _card("oldest due (seconds)", markup.esc(f"{oldest:.1f}"))
        + _card("recovery queue", markup.esc(queue), markup.url("/ui/recovery"))
        + _card("runs", markup.esc(counts.runs))
        + '</div><h2>Dispatches by state</h2><div class="cards">'
        + cards
        + "</div>"
        + markup.facts((("profile", markup.esc(ctx.profile)), ("read at", markup.when(now))))
    )
    return guard.html_response(
        markup.document("Overview", body, session=session, active="overview")
    )
