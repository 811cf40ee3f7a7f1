"""The recovery queue: `recovery_required` executions with their last reconcile observation,
and an operator's settling of one by hand with a reason (behind a confirmation step)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import (
    errors,
    keysets,
    permissions,
    plans,
    recovery,
    states,
    uncertainty,
)
from qinglong_dispatcher.web import context, operations, reads
from qinglong_dispatcher.web.ui import evidence, guard, live, markup, sessions

Operation = permissions.Operation
PAGE = 50


def _cursor(text: str) -> tuple[int, str]:
    return keysets.parse(text, form="<since_ms>:<dispatch_id>")


def _observed(snap: recovery.Snapshot) -> str:
    obs = snap.observation
    if obs is None:
        return '<span class="muted">not reconciled yet</span>'
    return markup.esc(uncertainty.observation_verdict(obs))


@guard.view(Operation.READ)
async def queue(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """`GET /ui/recovery?after=`: by lease expiry, a page at a time."""
    reads.only_params(request, ("after",))
    after = reads.query_field("after", request.query.get("after") or None, _cursor)
    ctx = context.of(request)
    now_ms = ctx.clock.now_ms()
    page = await ctx.store.list_recovery_required(now_ms=now_ms, limit=PAGE, after=after)
    rows = [
        (
            markup.link(
                markup.url("/ui/dispatches/" + markup.segment(snap.dispatch.dispatch_id)),
                snap.dispatch.dispatch_id,
            ),
            markup.esc(snap.dispatch.action_type),
            markup.esc(snap.dispatch.project_id),
            markup.ago(snap.since_ms, now_ms),
            _observed(snap),
            evidence.settle_form(snap.dispatch.dispatch_id, session),
        )
        for snap in page
    ]
    more = ""
    if len(page) == PAGE:
        last = page[-1]
        href = markup.url("/ui/recovery", after=f"{last.since_ms}:{last.dispatch.dispatch_id}")
        more = f'<p><a href="{href}" rel="next">Next page</a></p>'
    body = (
        '<p class="muted">Started, and their lease ran out before a completion: never replayed'
        " automatically. Settle one only once you know what its effect did.</p>"
        + markup.table(
            ("dispatch", "action", "project", "since", "last observation", ""),
            rows,
            empty="Nothing waits for recovery.",
        )
        + more
        + live.MARKER
    )
    return guard.html_response(
        markup.document("Recovery queue", body, session=session, active="recovery")
    )


@guard.form(Operation.RESOLVE)
async def resolve(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/recovery/{dispatch_id}/resolve` (`as`, `reason`, then `confirmed=yes`), as
    `POST /api/v1/recovery/{id}/resolve`."""
    dispatch_id = request.match_info["dispatch_id"]
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    outcome = fields.get("as", "")
    named = f" as {outcome}" if outcome in {c.value for c in states.Completion} else ""
    ask = guard.Confirm(
        f"Settle {dispatch_id}{named} by hand? This is final and audited under your name.",
        "Settle",
        "/ui/recovery",
        danger=True,
    )
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    admitted = await guard.admit(
        request,
        {"as": fields.get("as"), "reason": fields.get("reason"), "comment": fields.get("comment")},
    )
    done = await operations.resolve_as(context.of(request), admitted, dispatch_id)
    href = markup.url("/ui/dispatches/" + markup.segment(dispatch_id))
    body = (
        markup.notice(
            f"Settled {dispatch_id} as {done.status.value if done.status else '-'}.", kind="ok"
        )
        + f'<p><a href="{href}">The dispatch</a> · <a href="/ui/recovery">The queue</a></p>'
    )
    return guard.html_response(markup.document("Settled", body, session=session, active="recovery"))
