"""The freeze banner: while a change freeze is in force, every signed-in page says so at the
top of its main part (one read of the freezes in force per page; the claim's partial index
keeps it one probe while there is none)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import errors, freezes
from qinglong_dispatcher.web import context
from qinglong_dispatcher.web.ui import markup

_MAIN = "<main>"


def banner(in_force: list[freezes.Freeze]) -> str:
    """The banner's markup for the freezes in force (empty: none)."""
    if not in_force:
        return ""
    items = "".join(
        f"<li>freeze {freeze.freeze_id}: {markup.esc(freeze.scope())} until "
        f"{markup.when(freeze.until_ms)} — {markup.esc(freeze.reason)}</li>"
        for freeze in in_force
    )
    return (
        '<div class="notice freeze-banner" role="status"><b>Changes are frozen.</b> '
        f"Covered dispatches wait until the freeze ends or an operator lifts it.<ul>{items}</ul>"
        "</div>"
    )


async def add(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """`response` with the banner, if it is a whole page and a freeze is in force."""
    if not isinstance(response, web.Response) or response.content_type != "text/html":
        return response
    text = response.text
    if text is None or _MAIN not in text:
        return response
    ctx = context.of(request)
    now_ms = ctx.clock.now_ms()
    try:
        listed = await ctx.store.list_freezes()
    except errors.StoreError:
        return response  # the page itself read the store; a banner never fails it
    shown = banner([freeze for freeze in listed if freeze.in_force(now_ms)])
    if shown:
        response.text = text.replace(_MAIN, _MAIN + shown, 1)
    return response
