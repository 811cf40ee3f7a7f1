"""What every API handler reads: the store, the clock, the authenticator, the limits, the hub."""

from __future__ import annotations

import dataclasses
from typing import Final

from aiohttp import web

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import plan_previews, principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.web import events, limits


@dataclasses.dataclass(kw_only=True)
class Context:
    """The application's shared state (one per listener)."""

    store: ports.Store
    clock: ports.Clock
    authenticator: ports.Authenticator
    metrics: metrics.Metrics
    health: http.Health
    profile: str
    max_body_bytes: int
    read_timeout_s: float
    hub: events.Hub
    shown: plan_previews.ShownFields = dataclasses.field(default_factory=dict)
    """Each action type's plan members a preview shows in clear (the models' declarations)."""
    auth_failures: limits.Limiter = dataclasses.field(default_factory=limits.auth_failure_limiter)
    writes: limits.Limiter = dataclasses.field(default_factory=limits.write_limiter)


CONTEXT: Final = web.AppKey("context", Context)
PRINCIPAL: Final = web.RequestKey("principal", principals.Authenticated)
"""The request key holding the authenticated principal."""


def of(request: web.Request) -> Context:
    """The context of the application serving `request`."""
    return request.app[CONTEXT]


def principal(request: web.Request) -> principals.Authenticated:
    """The principal the server derived for `request` (authenticated routes only)."""
    return request[PRINCIPAL]
