"""What every API handler reads: the store, the clock, the authenticator, the limits, the hub."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from typing import Final

from aiohttp import web

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import plan_previews, plans, principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.ports import notifications as notify_ports
from qinglong_dispatcher.usecases.policy import Policy
from qinglong_dispatcher.web import events, idempotency, limits
from qinglong_dispatcher.web.oidc import flow as oidc_flow
from qinglong_dispatcher.web.ui import sessions


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
    writes: limits.Limiter
    """Each principal's writes (`QINGLONG_API_WRITES_PER_SECOND`, `_WRITE_BURST`)."""
    auth_audits: limits.Limiter = dataclasses.field(default_factory=limits.auth_audit_limiter)
    """Failed authentications written to the audit table, all clients together."""
    acting: ports.PrincipalStores | None = None
    """Where the writes become the token's principal; None: `store` itself (the daemon's)."""
    policy: Policy = dataclasses.field(
        default_factory=lambda: Policy(approval_ttl_ms=86_400_000, max_attempts=3)
    )
    """A new request's lifetime and a new dispatch's attempt budget (the settings')."""
    plan_models: Callable[[], plans.PlanModels] | None = None
    """The installed actions' plan models, for a type that is not built in."""
    idempotency: idempotency.Keys = dataclasses.field(default_factory=idempotency.Keys)
    """`Idempotency-Key`s of `POST /dispatches`, kept in this process."""
    ui_sessions: sessions.Sessions
    """The operator UI's sign-in sessions, kept in the store (web/ui/sessions.py)."""
    oidc: oidc_flow.Oidc | None = None
    """The OIDC sign-in's relying party (`QINGLONG_OIDC_FILE`); None: tokens only."""
    samples: notify_ports.SampleSender | None = None
    """What posts a subscription's signed sample (the daemon's listener always has one; None
    only in an application built to list its routes)."""


CONTEXT: Final = web.AppKey("context", Context)
PRINCIPAL: Final = web.RequestKey("principal", principals.Authenticated)
"""The request key holding the authenticated principal."""


def of(request: web.Request) -> Context:
    """The context of the application serving `request`."""
    return request.app[CONTEXT]


def principal(request: web.Request) -> principals.Authenticated:
    """The principal the server derived for `request` (authenticated routes only)."""
    return request[PRINCIPAL]


REQUEST_ID_HEADER: Final = "X-Request-Id"
REQUEST_ID: Final = web.RequestKey("request_id", str)
"""The request id the server drew (`request_id`)."""


def request_id(request: web.Request) -> str:
    """This request's id, drawn on first use (never taken from the client): in the audit row
    of its write or of its failed authentication, and in its response header."""
    if REQUEST_ID not in request:
        request[REQUEST_ID] = "req_" + secrets.token_hex(12)
    return request[REQUEST_ID]
