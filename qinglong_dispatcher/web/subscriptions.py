"""`GET /api/v1/subscriptions` (`viewer`): where notifications go, read-only; and
`POST /api/v1/subscriptions/{name}/test` (`operator`): one signed sample to a subscription's
destination, as `notify test` sends it.

Subscriptions are the schema's owner's (docs/notifications.md#subscriptions): on PostgreSQL no
login of the API, acting as any principal, may write one (`42501`), so the API and the UI show
them and name the `notify` command that changes them. A subscription is shown without its
secret's reference and with its URL cut to the origin: a Slack webhook's path is its token.
A test writes nothing anywhere (no attempt, no audit row): its answer is all there is of it.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.ports import notifications as notify_ports
from qinglong_dispatcher.web import auth, context, reads, writing

CHANGED_BY: Final = (
    "the schema's owner changes subscriptions with qinglong-dispatcher notify add|remove|test "
    "(the administrator URL that runs migrate); the API and the UI only show them"
)


def origin(url: str) -> str:
    """`scheme://host[:port]` of `url`: where it goes, never a path or query that holds a
    token."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


def shown(sub: n.Subscription) -> dict[str, object]:
    """One subscription as the API and the UI show it (no secret reference, no URL path)."""
    return {
        "name": sub.name,
        "destination": origin(sub.url),
        "kinds": list(sub.kinds),
        "action_type": sub.action_type,
        "project_id": sub.project_id,
        "target_prefix": sub.target_prefix,
        "format": sub.format,
    }


@auth.requires(auth.Operation.READ)
async def list_subscriptions(request: web.Request) -> web.Response:
    """`GET /api/v1/subscriptions`: every subscription by name, and how to change them."""
    reads.only_params(request, ())
    found = await context.of(request).store.list_subscriptions()
    return writing.ok(
        {"subscriptions": [shown(s) for s in found], "read_only": True, "changed_by": CHANGED_BY}
    )


@auth.requires(auth.Operation.TEST_SUBSCRIPTION)
async def test_subscription(request: web.Request) -> web.Response:
    """`POST /api/v1/subscriptions/{name}/test`: one signed sample to the subscription's
    destination and what it answered; a destination down is an answer too, never a 5xx."""
    refused = auth.write_refusal(request)
    if refused is not None:
        return refused
    await writing.read_body(request, ())
    ctx = context.of(request)
    sub = await find(ctx, request.match_info["name"])
    return writing.ok(result(sub, await send_test(ctx, sub)))


async def find(ctx: context.Context, name: str) -> n.Subscription:
    """The subscription of `name`; `SubscriptionNotFound` (a 404, the name not echoed)."""
    found = await ctx.store.get_subscription(name) if n.is_name(name) else None
    if found is None:
        raise n.SubscriptionNotFound("no subscription has this name")
    return found


async def send_test(ctx: context.Context, sub: n.Subscription) -> notify_ports.Tested:
    """Send `sub`'s signed sample (the API's test and the operator UI's button)."""
    assert ctx.samples is not None, "the listener wires a sample sender"
    return await ctx.samples.send_sample(sub)


def result(sub: n.Subscription, sent: notify_ports.Tested) -> dict[str, object]:
    """A test's answer: the destination's origin, the sample's `webhook-id`, the status code
    or why there was none, the latency; never the secret or the URL's path."""
    return {
        "name": sub.name,
        "destination": origin(sub.url),
        "webhook_id": sent.webhook_id,
        "delivered": sent.delivered,
        "status": sent.code,
        "error": sent.error_code,
        "latency_ms": sent.latency_ms,
    }
