"""`GET /ui/subscriptions`: where notifications go, as `GET /api/v1/subscriptions` reads them,
read-only, with the command that changes them (web/subscriptions.py says why); for an operator
a "Send a test" button per subscription, which posts `notify test`'s signed sample after a
confirm page and shows what the destination answered (nothing is written)."""

from __future__ import annotations

from aiohttp import web

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.domain import permissions
from qinglong_dispatcher.web import context, subscriptions
from qinglong_dispatcher.web.ui import guard, markup, sessions

TEST = permissions.Operation.TEST_SUBSCRIPTION


def _kinds(sub: n.Subscription) -> str:
    return (
        "every kind but dispatch.succeeded"
        if sub.kinds == n.DEFAULT_KINDS
        else ", ".join(sub.kinds)
    )


def _test_form(sub: n.Subscription, session: sessions.Session) -> str:
    action = f"/ui/subscriptions/{markup.segment(sub.name)}/test"
    return markup.post_form(action, session, "", "Send a test…")


@guard.view(permissions.Operation.READ)
async def page(request: web.Request, session: sessions.Session) -> web.StreamResponse:
    """The subscriptions by name: destination (origin only), kinds, filters, format; an
    operator's rows end with the test button."""
    found = await context.of(request).store.list_subscriptions()
    tests = permissions.admits(session.principal, TEST)
    head = ("name", "destination", "kinds", "action", "project", "target prefix", "format")
    table = markup.table(
        head + (("",) if tests else ()),
        (
            (
                markup.esc(s.name),
                markup.esc(subscriptions.origin(s.url)),
                markup.esc(_kinds(s)),
                markup.esc(s.action_type or "every action"),
                markup.esc(s.project_id or "every project"),
                markup.esc(s.target_prefix or "every target"),
                markup.esc(s.format),
                *((_test_form(s, session),) if tests else ()),
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


@guard.form(TEST)
async def test(
    request: web.Request, session: sessions.Session, fields: dict[str, str]
) -> web.StreamResponse:
    """`POST /ui/subscriptions/{name}/test` (then `confirmed=yes`): the sample sent, and the
    page of what the destination answered."""
    ctx = context.of(request)
    sub = await subscriptions.find(ctx, request.match_info["name"])
    ask = guard.Confirm(
        f"Send a signed sample to subscription {sub.name} "
        f"({subscriptions.origin(sub.url)})? It receives one approval.requested event of no "
        "real action (its data says sample: true); nothing is recorded.",
        "Send the test",
        "/ui/subscriptions",
    )
    asking = guard.confirmed(request, session, fields, ask)
    if asking is not None:
        return asking
    guard.spend_write(request)
    sent = await subscriptions.send_test(ctx, sub)
    shown = subscriptions.result(sub, sent)
    verdict = (
        markup.notice(f"Delivered: {sub.name}'s destination answered {sent.code}.", kind="ok")
        if sent.delivered
        else markup.notice(
            f"Not delivered: {sent.code if sent.code is not None else sent.error_code}.",
            kind="error",
        )
    )
    body = (
        verdict
        + markup.facts((key, markup.esc("-" if v is None else v)) for key, v in shown.items())
        + "<p>"
        + markup.link(markup.url("/ui/subscriptions"), "Back to notifications")
        + "</p>"
    )
    return guard.html_response(
        markup.document("Test sent", body, session=session, active="subscriptions")
    )
