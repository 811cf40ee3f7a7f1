"""Lifting a freeze for one dispatch (an operator's who is not its requester): the inbox's
frozen row links to a page naming the freezes that hold the dispatch, with a reason field;
the form asks for a confirmation, then lifts as `POST /api/v1/dispatches/{id}/lift-freeze`
does. The database refuses the requester and records the lift under the signed-in principal."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import errors, freezes, plans
from qinglong_dispatcher.web import context, reads
from qinglong_dispatcher.web import freezes as freeze_writes
from qinglong_dispatcher.web.ui import guard, markup, sessions

Operation = guard.Operation


def path(dispatch_id: str) -> str:
    """The lift page of a dispatch (its id escaped as a path segment)."""
    return "/ui/dispatches/" + markup.segment(dispatch_id) + "/lift-freeze"


def _dispatch_id(request: web.Request) -> str:
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    return dispatch_id


def _covering(covering: list[int], listed: list[freezes.Freeze]) -> str:
    known = {freeze.freeze_id: freeze for freeze in listed}
    items = "".join(
        f"<li>freeze {freeze_id}"
        + (
            ""
            if freeze_id not in known
            else f": {markup.esc(known[freeze_id].scope())} until "
            f"{markup.when(known[freeze_id].until_ms)} — {markup.esc(known[freeze_id].reason)}"
        )
        + "</li>"
        for freeze_id in covering
    )
    return f'<ul class="freezes">{items}</ul>'


@guard.view(Operation.LIFT)
async def page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/dispatches/{dispatch_id}/lift-freeze`: the freezes holding the dispatch and
    the lift's reason field."""
    reads.only_params(request, ())
    dispatch_id = _dispatch_id(request)
    ctx = context.of(request)
    if await ctx.store.get_execution(dispatch_id) is None:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    covering = await ctx.store.freezes_covering(dispatch_id)
    back = markup.link(markup.url("/ui/inbox"), "The inbox")
    dispatch = markup.link(
        markup.url("/ui/dispatches/" + markup.segment(dispatch_id)), f"dispatch {dispatch_id}"
    )
    if not covering:
        body = f"<p>No freeze holds {dispatch} now.</p><p>{back}</p>"
    else:
        body = (
            f"<p>These freezes hold {dispatch}:</p>"
            + _covering(covering, await ctx.store.list_freezes())
            + markup.notice(
                "A lift lets this dispatch alone start while the freeze lasts. It is audited "
                "under your name; the database refuses the dispatch's requester."
            )
            + markup.post_form(
                path(dispatch_id),
                session,
                markup.text_field("reason", "Reason", maxlength=freezes.MAX_REASON),
                "Lift for this dispatch…",
                danger=True,
            )
            + f"<p>{back}</p>"
        )
    return guard.html_response(
        markup.document(f"Lift the freeze for {dispatch_id}", body, session=session, active="inbox")
    )


@guard.form(Operation.LIFT)
async def lift(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/dispatches/{dispatch_id}/lift-freeze` (`reason`, then `confirmed=yes`)."""
    dispatch_id = _dispatch_id(request)
    ask = guard.Confirm(
        f"Lift the freeze for dispatch {dispatch_id} alone? It may start at once. This is "
        "audited under your name.",
        "Lift it",
        path(dispatch_id),
        danger=True,
    )
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    admitted = await guard.admit(request, {"reason": fields.get("reason")})
    lifted = await freeze_writes.lift_as(admitted, dispatch_id)
    said = (
        f"Lifted freeze {', '.join(str(f) for f in lifted)} for {dispatch_id}."
        if lifted
        else f"No freeze holds {dispatch_id} now: nothing to lift."
    )
    body = (
        markup.notice(said, kind="ok" if lifted else "info")
        + "<p>"
        + markup.link(markup.url("/ui/dispatches/" + markup.segment(dispatch_id)), "The dispatch")
        + " · "
        + markup.link(markup.url("/ui/inbox"), "The inbox")
        + "</p>"
    )
    return guard.html_response(markup.document("Lifted", body, session=session, active="inbox"))
