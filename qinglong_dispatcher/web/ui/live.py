"""Live refresh of the UI's lists, as progressive enhancement over the API's event stream.

`GET /ui/events` is `GET /api/v1/events` for a signed-in session (the same hub, the same
bounds). A list page carries `MARKER`: the script (`static/live.js`, the page's only script,
allowed by the UI's Content-Security-Policy as `'self'`) listens there and, when something
changed, reloads the page's `main` in place while nothing on it is being edited, or else says
that new activity waits. Without JavaScript nothing of this runs and the page works as before.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from qinglong_dispatcher.web import context, events
from qinglong_dispatcher.web.ui import guard, sessions

MARKER: Final = (
    '<p class="live" id="live" data-events="/ui/events" hidden aria-live="polite"></p>'
    '<script src="/ui/static/live.js" defer></script>'
)
"""What a list page appends to its body to refresh itself."""


@guard.view(guard.Operation.READ)
async def stream(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/events`: Server-Sent Events of new requests and settled dispatches."""
    del session  # any signed-in principal reads what the API's viewer reads
    ctx = context.of(request)
    try:
        return await events.stream(request, ctx.hub, ctx.read_timeout_s)
    except events.TooManyStreams:
        raise guard.Refused("too_many_streams", "too many live pages: reload later") from None
