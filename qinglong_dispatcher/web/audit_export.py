"""`GET /api/v1/audit/export` (`viewer`): the audit export as a stream, one record a line.

The same records, order and cursor as `audit export` (`usecases.exporting`): a page of at most
`limit` records written as they are read, JSON lines (schema v1) or CEF. Every record carries
the cursor just after it (`cursor`, CEF `cs4`); the next page is `after=` the last one's. A
page shorter than `limit` means the export has caught up with the commit horizon.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from qinglong_dispatcher import __version__
from qinglong_dispatcher.domain import audit_export, audit_formats
from qinglong_dispatcher.usecases import exporting
from qinglong_dispatcher.web import auth, context, problems, reads

DEFAULT_LIMIT: Final = 1000
MAX_LIMIT: Final = 10_000
SETTLE_S: Final = 2.0
"""How long a request waits for writers in progress when it starts (the CLI waits longer)."""

_MEDIA: Final = {
    audit_formats.Format.JSONL: "application/x-ndjson",
    audit_formats.Format.CEF: "text/plain",
}


def _line(record: dict[str, object], form: audit_formats.Format) -> bytes:
    if form is audit_formats.Format.CEF:
        return (audit_formats.cef_line(record, version=__version__) + "\n").encode()
    return (audit_formats.json_line(record) + "\n").encode()


@auth.requires(auth.Operation.READ)
async def export(request: web.Request) -> web.StreamResponse:
    """`GET /api/v1/audit/export`: one page of the export, streamed."""
    reads.only_params(request, ("since", "after", "format", "limit"))
    q = request.query
    since_ms = reads.query_field("since", q.get("since"), audit_export.parse_since)
    after = reads.query_field("after", q.get("after"), audit_export.Cursor.parse)
    form = reads.query_field("format", q.get("format"), _format) or audit_formats.Format.JSONL
    limit = reads.query_field("limit", q.get("limit"), reads.limit_up_to(MAX_LIMIT))
    if since_ms is None and after is None:
        raise problems.BadField("since", "since: give since (RFC 3339) or after (a cursor)")
    wanted = DEFAULT_LIMIT if limit is None else limit
    plan = exporting.Export(
        after=after or audit_export.Cursor(),
        since_ms=since_ms or 0,
        page_size=min(wanted, audit_export.MAX_PAGE),
        settle_s=SETTLE_S,
    )
    pages = exporting.pages(context.of(request).store, plan)
    try:
        # The first page is read before the status line: a store fault is still a problem.
        page = await anext(pages, None)
        response = web.StreamResponse(
            headers={"Content-Type": _MEDIA[form], "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        sent = 0
        while page is not None and sent < wanted:
            chunk = [_line(r.as_dict(c), form) for r, c in page.records[: wanted - sent]]
            sent += len(chunk)
            await response.write(b"".join(chunk))
            page = await anext(pages, None) if sent < wanted else None
    finally:
        await pages.aclose()  # also when the client went away mid-stream
    await response.write_eof()
    return response


def _format(text: str) -> audit_formats.Format:
    try:
        return audit_formats.Format(text)
    except ValueError:
        raise ValueError("format: must be jsonl or cef") from None


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The route's OpenAPI path item (`errors`: the reads' error responses)."""
    query = [
        ("since", "records committed at or after this RFC 3339 time", {"type": "string"}),
        ("after", "resume after this cursor (`<audit>.<ledger>`)", {"type": "string"}),
        ("format", "`jsonl` (schema v1, default) or `cef`", {"enum": ["jsonl", "cef"]}),
        ("limit", "records in this page", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
    ]
    return {
        "/audit/export": {
            "get": {
                "operationId": "exportAudit",
                "summary": "Every audit record and ledger line in database order, streamed one "
                "a line, paged by a cursor; `since` or `after` required (role viewer)",
                "security": [{"bearer": []}],
                "parameters": [
                    {"name": n, "in": "query", "required": False, "description": d, "schema": s}
                    for n, d, s in query
                ],
                "responses": {
                    "200": {
                        "description": "Records, one a line (docs/audit/record-v1.schema.json)",
                        "content": {
                            "application/x-ndjson": {"schema": {"type": "string"}},
                            "text/plain": {"schema": {"type": "string"}},
                        },
                    },
                    **errors,
                },
            }
        }
    }
