"""The daemon's listeners: the metrics and health listener, and the control-plane API."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors

if TYPE_CHECKING:
    from pathlib import Path

    from qinglong_dispatcher.lifecycle import daemon, http, metrics
    from qinglong_dispatcher.web.oidc import flow as oidc_flow

log = structlog.get_logger("qinglong_dispatcher.daemon")


def deliverer(
    settings: Settings, store: ports.Store, the_metrics: metrics.Metrics
) -> daemon.Service:
    """The notification deliverer (`QINGLONG_NOTIFY_DELIVER`); aiohttp's client waits for its
    first post. It holds the database's one delivery lease under the daemon's owner id."""
    from qinglong_dispatcher.notifying import deliverer as notify

    return notify.Deliverer(
        store,
        owner=settings.owner_id,
        ui_base=settings.public_url,
        observe=the_metrics.notifications,
    )


def api_server(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    the_metrics: metrics.Metrics,
    health: http.Health,
    *,
    authenticator: ports.Authenticator | None = None,
    heartbeat_s: float | None = None,
    events_poll_s: float | None = None,
    acting: ports.PrincipalStores | None = None,
) -> daemon.Service:
    """The control-plane API (`QINGLONG_API_LISTEN`); aiohttp is imported here, only then.

    Until a token store fills `authenticator`, every token is refused (deny by default). The
    writes act as each token's principal through `acting` (by default `store` itself)."""
    from qinglong_dispatcher.notifying import samples
    from qinglong_dispatcher.web import auth, context, events, limits, server
    from qinglong_dispatcher.web.ui import sessions

    address = settings.api_address
    assert address is not None
    tls = None
    if settings.api_tls_cert_file is not None and settings.api_tls_key_file is not None:
        tls = server.tls_context(
            settings.api_tls_cert_file, settings.api_tls_key_file, settings.api_client_ca_file
        )
    hub = events.Hub(
        max_subscribers=max(1, settings.api_max_connections // 4),
        heartbeat_s=events.HEARTBEAT_S if heartbeat_s is None else heartbeat_s,
        poll_s=events.POLL_S if events_poll_s is None else events_poll_s,
    )
    ctx = context.Context(
        store=store,
        clock=clock,
        authenticator=auth.NoTokens() if authenticator is None else authenticator,
        metrics=the_metrics,
        health=health,
        profile=settings.profile,
        max_body_bytes=settings.api_max_body_bytes,
        read_timeout_s=settings.api_read_timeout_seconds,
        hub=hub,
        writes=limits.write_limiter(
            rate=settings.api_writes_per_second, burst=settings.api_write_burst
        ),
        shown=bootstrap.plan_preview_fields(),
        acting=acting,
        policy=bootstrap.policy(settings),
        plan_models=bootstrap.action_plan_models,
        ui_sessions=sessions.Sessions(
            store,
            idle_s=settings.ui_idle_timeout_seconds,
            lifetime_s=settings.ui_session_lifetime_seconds,
        ),
        oidc=None if settings.oidc_file is None else _oidc(settings.oidc_file),
        samples=samples.Samples(ui_base=settings.public_url),
    )
    return server.ApiServer(
        address=address, ctx=ctx, max_connections=settings.api_max_connections, tls=tls
    )


def _oidc(path: Path) -> oidc_flow.Oidc:
    import importlib.util

    from qinglong_dispatcher.web.oidc import flow, mapping

    if importlib.util.find_spec("joserfc") is None:
        raise errors.InvalidInput(
            "QINGLONG_OIDC_FILE: OIDC sign-in needs the [oidc] extra "
            "(pip install 'qinglong-dispatcher[oidc]')"
        )
    return flow.Oidc(mapping.load(path))


def metrics_listener(settings: Settings, parts: daemon.Parts) -> http.Listener:
    """`/metrics`, `/healthz` and `/readyz`, served from now on: not ready until the daemon
    has installed its SIGTERM watch (`Daemon.run`). A port it cannot bind is a configuration
    error."""
    from qinglong_dispatcher.lifecycle import http

    listener = http.Listener(
        settings.metrics_host, settings.metrics_port, the_metrics=parts.metrics, health=parts.health
    )
    try:
        port = listener.start()
    except OSError as exc:
        raise errors.ConfigurationError(
            f"QINGLONG_METRICS_PORT: cannot listen on "
            f"{settings.metrics_host}:{settings.metrics_port} ({exc.strerror})"
        ) from None
    log.info("daemon.listening", host=settings.metrics_host, port=port)
    return listener
