"""Each request's latency, per route template, into `api_metrics.ApiMetrics.latency`.

The outermost middleware notes when a request arrived; the response's `prepare` (its headers
going out) observes the time since, with the matched route's template, never the raw path: an
id in a path, or a path that matches nothing, adds no series. An event stream is timed to its
first byte, not for as long as it stays open. A request whose connection drops before any
response is not observed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from qinglong_dispatcher.lifecycle import api_metrics
from qinglong_dispatcher.web import context

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

STARTED: Final = web.RequestKey("request_started", float)
"""The monotonic time the request reached the application."""


def route_of(request: web.Request) -> str:
    """The template of the route `request` matched (`/api/v1/dispatches/{dispatch_id}`), or
    `unmatched`."""
    resource = request.match_info.route.resource
    if resource is None:
        return api_metrics.UNMATCHED
    return resource.canonical


@web.middleware
async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Note the arrival (outermost, so refusals of the middlewares inside are timed too)."""
    request[STARTED] = time.monotonic()
    return await handler(request)


async def observe(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: observe the request's latency once its headers go out."""
    started = request.get(STARTED)
    if started is None:
        return
    context.of(request).metrics.api.observe_request(
        method=request.method,
        route=route_of(request),
        status=response.status,
        seconds=time.monotonic() - started,
    )
