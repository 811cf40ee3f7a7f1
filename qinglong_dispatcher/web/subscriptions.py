"""`GET /api/v1/subscriptions` (`viewer`): where notifications go, read-only.

Subscriptions are the schema's owner's (docs/notifications.md#subscriptions): on PostgreSQL no
login of the API, acting as any principal, may write one (`42501`), so the API and the UI show
them and name the `notify` command that changes them. A subscription is shown without its
secret's reference and with its URL cut to the origin: a Slack webhook's path is its token.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from aiohttp import web

from qinglong_dispatcher.domain import notifications as n
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
