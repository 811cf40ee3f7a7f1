"""A UI session is the store's, not a process's: signed in through one daemon's listener, it
is accepted by another's on the same PostgreSQL database (its CSRF token too), signing out on
one ends it on the other, and revoking its token ends it on both. On SQLite (one daemon per
file) it outlives a restart of the listener."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.bootstrap import listeners
from qinglong_dispatcher.domain import principals
from qinglong_dispatcher.lifecycle import http, metrics
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server, stores
from tests.support.api_writes import Served, serving
from tests.support.clock import ManualClock
from tests.support.ui_client import UiClient


@contextlib.asynccontextmanager
async def _listener(
    store: ports.Store, acting: ports.PrincipalStores | None, tmp_path: Path
) -> AsyncIterator[str]:
    """Another daemon's API listener on `store` (its own context and sessions); its origin."""
    server = listeners.api_server(
        api_server.api_settings(tmp_path / "unused.db"),
        store,
        ManualClock(int(time.time() * 1000)),
        metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False),
        http.Health(cadence_s=1.0),
        authenticator=store,
        acting=acting,
    )
    assert isinstance(server, web_server.ApiServer)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.aclose()


@pytest.mark.postgres
async def test_two_daemons_on_one_database_share_sessions(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    async with serving("postgres", tmp_path_factory, tmp_path) as it:
        database = str(await it.harness.scalar("SELECT current_database()"))
        other = await stores.open_postgres(stores.runtime_url(database), max_size=2)
        try:
            async with _listener(other, it.ctx.acting, tmp_path) as second, UiClient(it) as ui:
                first = ui.origin
                await ui.sign_in("alice")  # through the first daemon, its CSRF token read there
                cookie = ui.cookie().value
                ui.origin = second
                assert (await ui.get("/ui/session"))[0] == 200
                ui.origin = first
                await ui.get("/ui")
                ui.origin = second
                status, headers, text = await ui.post("/ui/signout", {})
                assert (status, headers["Location"]) == (303, "/ui/signin"), text[:300]
                ui.origin = first
                ui.session.cookie_jar.update_cookies({"qinglong_ui": cookie})
                assert (await ui.get("/ui"))[0] == 303  # signed out on the other daemon
                await ui.sign_in("alice")
                ui.origin = second
                assert (await ui.get("/ui"))[0] == 200
                await it.admin.revoke_token(it.token_ids["alice"])
                for origin in (first, second):
                    ui.origin = origin
                    status, headers, _ = await ui.get("/ui")
                    assert status == 303
                    assert headers["Location"].startswith("/ui/signin")
        finally:
            await other.close()


async def test_a_session_outlives_a_restart_of_the_listener(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        store = harness.store
        new, secret = principals.NewToken.issue(
            principal="vic", role=principals.TokenRole.VIEWER, ttl_ms=3_600_000, created_by="t"
        )
        await store.create_token(new)
        async with _listener(store, None, tmp_path) as before:
            it = Served(harness, store, before + "/api/v1")
            it.secrets["vic"] = secret
            ui = UiClient(it)
            await ui.sign_in("vic")
        cookie = ui.cookie().value
        async with ui, _listener(store, None, tmp_path) as after:  # the first one is gone
            ui.origin = after
            assert (await ui.get("/ui/session"))[0] == 200
            assert ui.cookie().value == cookie
            status, _, _ = await ui.post("/ui/signout", {})
            assert status == 303
            ui.session.cookie_jar.update_cookies({"qinglong_ui": cookie})
            assert (await ui.get("/ui"))[0] == 303
