"""The audit page: the security audit records about one subject (a dispatch id), as
`GET /api/v1/audit?subject=` reads them; a listing of the whole table needs a store query that
does not exist yet."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.web import context, reads
from qinglong_dispatcher.web.ui import guard, markup, sessions


@guard.view(principals.TokenRole.VIEWER)
async def audit(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/audit?subject=ID`."""
    reads.only_params(request, ("subject",))
    text = request.query.get("subject") or None
    subject = reads.query_field("subject", text, reads.identifier("subject"))
    form = (
        '<form method="get" action="/ui/audit">'
        + markup.text_field("subject", "Dispatch id", value=subject or "")
        + '<button type="submit">Show</button></form>'
    )
    table = ""
    if subject is not None:
        events = await context.of(request).store.audit_events(subject)
        table = markup.table(
            ("at", "kind", "principal", "actor", "project", "detail"),
            (
                (
                    markup.when(e.committed_at_ms),
                    markup.esc(e.kind),
                    markup.esc(e.principal),
                    markup.esc(e.actor),
                    markup.esc(e.project_id),
                    markup.esc(e.detail_code),
                )
                for e in events
            ),
            empty="No audit record names this subject.",
        )
    return guard.html_response(
        markup.document("Audit", form + table, session=session, active="audit")
    )
