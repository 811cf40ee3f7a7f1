""" "Request again" on a dispatch's page: a failed, blocked or cancelled dispatch becomes a new
pending approval request for the same plan, after a confirm page (`usecases.resubmitting`)."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

from qinglong_dispatcher.domain import dispatch_views, errors, ids, permissions, plans
from qinglong_dispatcher.usecases import resubmitting
from qinglong_dispatcher.web import context, resubmits
from qinglong_dispatcher.web.ui import guard, markup, sessions


def section(detail: dispatch_views.Detail, session: sessions.Session) -> str:
    """The "Request again" form of a dispatch that may be requested again, for a principal
    who may create requests; nothing otherwise."""
    if detail.execution.status not in resubmitting.RESUBMITTABLE:
        return ""
    if detail.dispatch.action_type in resubmitting.BOUND_TYPES:
        return ""
    if not permissions.admits(session.principal, guard.Operation.CREATE):
        return ""
    dispatch_id = markup.segment(detail.dispatch.dispatch_id)
    return (
        "<h2>Request again</h2>"
        '<p class="muted">A new approval request for the same plan, under a new action ref: '
        "it runs only once approved. This dispatch stays as it is.</p>"
        + markup.post_form(f"/ui/dispatches/{dispatch_id}/resubmit", session, "", "Request again…")
    )


def chain(resubmitted_from: str | None, requested_again: Sequence[str]) -> list[tuple[str, str]]:
    """The facts linking a request or dispatch both ways: what it was requested again from,
    and the requests made again from it (none: no fact)."""
    pairs = []
    if resubmitted_from is not None:
        kind = "dispatches" if ids.is_dispatch_id(resubmitted_from) else "approvals"
        href = markup.url(f"/ui/{kind}/" + markup.segment(resubmitted_from))
        pairs.append(("requested again from", markup.link(href, resubmitted_from)))
    if requested_again:
        shown = ", ".join(
            markup.link(markup.url("/ui/approvals/" + markup.segment(r)), r)
            for r in requested_again
        )
        pairs.append(("requested again as", shown))
    return pairs


@guard.form(guard.Operation.CREATE)
async def resubmit(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/dispatches/{dispatch_id}/resubmit` (then `confirmed=yes`): to the new
    request's page."""
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    back = "/ui/dispatches/" + markup.segment(dispatch_id)
    ask = guard.Confirm(
        f"Request dispatch {dispatch_id} again? A new approval request for the same plan is "
        "made; nothing runs until it is approved.",
        "Request again",
        back,
    )
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    admitted = await guard.admit(request, {})
    done = await resubmits.resubmit_as(context.of(request), admitted, dispatch_id)
    return guard.redirect("/ui/approvals/" + markup.segment(done.approval.approval_request_id))
