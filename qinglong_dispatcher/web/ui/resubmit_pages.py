""" "Request again" on a dispatch's page: a failed, blocked or cancelled dispatch becomes a new
pending approval request for the same plan, after a confirm page (`usecases.resubmitting`)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import dispatch_views, errors, permissions, plans
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
