"""The control-plane API served for real on 127.0.0.1 over a real SQLite store, and a test-only
authenticator that checks tokens from a dict (a fixture, not a database mock: the token store
that fills `ports.Authenticator` in production is built apart)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.bootstrap import listeners
from qinglong_dispatcher.config.settings import Settings, load_settings
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.web import context, events, limits
from qinglong_dispatcher.web import server as web_server
from qinglong_dispatcher.web.ui import sessions
from tests.support import stores
from tests.support.clock import START_MS, ManualClock

VIEWER = "viewer-token-0123456789"
OPERATOR = "operator-token-0123456789"
TOKENS: Mapping[str, principals.Authenticated] = {
    VIEWER: principals.Authenticated(
        principal="vera", role=principals.TokenRole.VIEWER, token_id="tok-viewer"
    ),
    OPERATOR: principals.Authenticated(
        principal="otto", role=principals.TokenRole.OPERATOR, token_id="tok-operator"
    ),
}


class DictAuthenticator:
    """`ports.Authenticator` over a fixed dict of tokens; compares every one in constant time."""

    def __init__(self, tokens: Mapping[str, principals.Authenticated] = TOKENS) -> None:
        self._tokens = dict(tokens)
        self.calls = 0
        self.refusals: list[principals.AuthFailure] = []

    async def refused(self, failure: principals.AuthFailure) -> None:
        self.refusals.append(failure)

    async def authenticate(self, secret: str) -> principals.Authenticated | None:
        self.calls += 1
        found = None
        for token, principal in self._tokens.items():
            if hmac.compare_digest(token.encode(), secret.encode()):
                found = principal
        return found


def api_settings(db: Path, **env: str) -> Settings:
    """Edge settings on `db` with the API on a free loopback port (`env`: more QINGLONG_*)."""
    environ = {"QINGLONG_API_LISTEN": "127.0.0.1:0", "QINGLONG_METRICS_PORT": "0", **env}
    return load_settings(database_url=f"sqlite:///{db}", environ=environ)


def small_context(
    store: ports.Store, authenticator: ports.Authenticator, *, burst: int = 1
) -> context.Context:
    """A web context for building the app in-process: a manual clock, small limits, one
    event subscriber, writes limited to 2/s with `burst`."""
    return context.Context(
        store=store,
        clock=ManualClock(),
        authenticator=authenticator,
        metrics=metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False),
        health=http.Health(cadence_s=1.0),
        profile="edge",
        max_body_bytes=1024,
        read_timeout_s=0.5,
        hub=events.Hub(max_subscribers=1),
        writes=limits.write_limiter(rate=2.0, burst=burst),
        ui_sessions=sessions.Sessions(store),
    )


async def open_store(db: Path) -> ports.Store:
    """A migrated SQLite store at `db`."""
    store = await stores.open_sqlite(db, busy_timeout_s=5.0)
    await store.migrate(now_ms=START_MS)
    return store


@contextlib.asynccontextmanager
async def serving(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    *,
    authenticator: ports.Authenticator | None = None,
    heartbeat_s: float | None = None,
    events_poll_s: float = 0.05,
    the_metrics: metrics.Metrics | None = None,
) -> AsyncIterator[web_server.ApiServer]:
    """The API server started (bound) and served over `store` as the daemon serves it (its
    event feed included); closed on exit. Yields the server, whose `port` is the bound one."""
    server = listeners.api_server(
        settings,
        store,
        clock,
        the_metrics or metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False),
        http.Health(cadence_s=1.0),
        authenticator=authenticator or DictAuthenticator(),
        heartbeat_s=heartbeat_s,
        events_poll_s=events_poll_s,
    )
    assert isinstance(server, web_server.ApiServer)
    await server.start()
    stop = anyio.Event()
    # A plain task, not a task group: a fixture's teardown may run in another task.
    served = asyncio.ensure_future(server.serve(stop))
    try:
        yield server
    finally:
        stop.set()
        await served
        await server.aclose()


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of `token`."""
    return {"Authorization": f"Bearer {token}"}
