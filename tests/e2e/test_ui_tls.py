"""The operator UI over TLS: the session cookie is `Secure` there, and the session settings
reach the listener (`QINGLONG_UI_IDLE_TIMEOUT_SECONDS`)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import aiohttp

from qinglong_dispatcher.domain import principals
from tests.support import api_server, pki
from tests.support.clock import ManualClock


async def test_over_tls_the_cookie_is_secure_and_the_idle_timeout_is_the_setting(
    tmp_path: Path,
) -> None:
    pki.make(tmp_path)
    db = tmp_path / "ui.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(
        db,
        QINGLONG_API_TLS_CERT_FILE=str(tmp_path / "server.pem"),
        QINGLONG_API_TLS_KEY_FILE=str(tmp_path / "server.key"),
        QINGLONG_UI_IDLE_TIMEOUT_SECONDS="120",
        QINGLONG_UI_SESSION_LIFETIME_SECONDS="3600",
    )
    client_tls = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    # A real token in the store: a UI session is kept there and names the token it began with.
    viewer, secret = principals.NewToken.issue(
        principal="vera", role=principals.TokenRole.VIEWER, ttl_ms=3_600_000, created_by="test"
    )
    try:
        await store.create_token(viewer)
        async with (
            api_server.serving(
                settings, store, ManualClock(int(time.time() * 1000)), authenticator=store
            ) as served,
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session,
        ):
            base = f"https://127.0.0.1:{served.port}"
            async with session.post(
                base + "/ui/signin",
                data={"token": secret},
                ssl=client_tls,
                allow_redirects=False,
            ) as response:
                assert response.status == 303
                cookie = response.headers["Set-Cookie"]
            assert "; Secure" in cookie
            assert "HttpOnly" in cookie
            assert "SameSite=Strict" in cookie
            async with session.get(base + "/ui/session", ssl=client_tls) as response:
                assert response.status == 200
                text = await response.text()
            assert "<dt>idle timeout</dt><dd>0:02:00</dd>" in text
            assert "<dt>absolute lifetime</dt><dd>1:00:00</dd>" in text
    finally:
        await store.close()
