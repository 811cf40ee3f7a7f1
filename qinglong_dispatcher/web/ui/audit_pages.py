"""The audit page: the security audit log newest first, a page at a time, optionally about one
subject, one principal or one kind, as `GET /api/v1/audit` reads it."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import audit_views
from qinglong_dispatcher.web import context, reads
from qinglong_dispatcher.web.ui import guard, markup, sessions

_FILTERS = (("subject", "Subject id"), ("principal", "Principal"), ("kind", "Kind"))


@guard.view(guard.Operation.READ)
async def audit(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/audit?subject=&principal=&kind=&after=`."""
    reads.only_params(request, ("subject", "principal", "kind", "after"))
    q = request.query
    given = {name: q.get(name) or None for name, _ in _FILTERS}
    query = audit_views.AuditQuery(
        subject_id=reads.query_field("subject", given["subject"], reads.identifier("subject")),
        principal=reads.query_field("principal", given["principal"], reads.identifier("principal")),
        kind=reads.query_field("kind", given["kind"], audit_views.parse_kind),
        before=reads.query_field("after", q.get("after") or None, audit_views.parse_cursor),
    )
    page = await context.of(request).store.audit_page(query)
    form = (
        '<form method="get" action="/ui/audit">'
        + "".join(
            markup.text_field(name, label, value=given[name] or "") for name, label in _FILTERS
        )
        + '<button type="submit">Show</button></form>'
    )
    table = markup.table(
        ("at", "kind", "principal", "actor", "subject", "detail", "token", "client", "request"),
        (
            (
                markup.when(e.committed_at_ms),
                markup.esc(e.kind),
                markup.esc(e.principal),
                markup.esc(e.actor),
                markup.esc(e.subject_id),
                markup.esc(e.detail_code),
                markup.esc(e.token_id or ""),
                markup.esc(e.client_address or ""),
                markup.esc(e.request_id or ""),
            )
            for e in page.events
        ),
        empty="No audit record matches.",
    )
    more = ""
    if page.next is not None:
        href = markup.url("/ui/audit", **given, after=str(page.next))
        more = f'<p><a href="{href}" rel="next">Older records</a></p>'
    return guard.html_response(
        markup.document("Audit", form + table + more, session=session, active="audit")
    )
