"""`GET /ui/subscriptions`: where notifications go, as `GET /api/v1/subscriptions` reads them,
read-only, with the command that changes them (web/subscriptions.py says why)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.domain import permissions
from qinglong_dispatcher.web import context, subscriptions
from qinglong_dispatcher.web.ui import guard, markup, sessions


def _kinds(sub: n.Subscription) -> str:
    return (
        "every kind but dispatch.succeeded"
        if sub.kinds == n.DEFAULT_KINDS
        else ", ".join(sub.kinds)
    )


@guard.view(permissions.Operation.READ)
async def page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """The subscriptions by name: destination (origin only), kinds, filters, format."""
    found = await context.of(request).store.list_subscriptions()
    table = markup.table(
        ("name", "destination", "kinds", "action", "project", "target prefix", "format"),
        (
            (
                markup.esc(s.name),
                markup.esc(subscriptions.origin(s.url)),
                markup.esc(_kinds(s)),
                markup.esc(s.action_type or "every action"),
                markup.esc(s.project_id or "every project"),
                markup.esc(s.target_prefix or "every target"),
                markup.esc(s.format),
            )
            for s in found
        ),
        empty="No subscription: nobody is told of anything (the outbox keeps no event).",
    )
    note = (
        f'<p class="muted" id="read-only">Read-only: {markup.esc(subscriptions.CHANGED_BY)}. '
        "A subscription's URL is shown only to its origin and its secret never.</p>"
    )
    return guard.html_response(
        markup.document("Notifications", table + note, session=session, active="subscriptions")
    )
