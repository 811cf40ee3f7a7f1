"""The API over TLS and with client certificates (mTLS), on 127.0.0.1 with certificates made for
the test by a throwaway CA; and a key that does not load is one line naming the settings."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest

from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server
from tests.support import pki as pki_files
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    return pki_files.make(tmp_path)


def _client_context(pki: Path, *, with_certificate: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_certificate:
        ctx.load_cert_chain(pki / "client.pem", pki / "client.key")
    return ctx


async def _status(port: int, ctx: ssl.SSLContext) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"https://127.0.0.1:{port}/api/v1/status", headers=bearer(VIEWER), ssl=ctx
        ) as response,
    ):
        return response.status


async def test_the_api_serves_over_tls_and_requires_a_client_certificate_with_a_ca(
    pki: Path,
) -> None:
    db = pki / "tls.db"
    store = await api_server.open_store(db)
    tls = {
        "QINGLONG_API_TLS_CERT_FILE": str(pki / "server.pem"),
        "QINGLONG_API_TLS_KEY_FILE": str(pki / "server.key"),
    }
    try:
        settings = api_server.api_settings(db, **tls)
        async with api_server.serving(settings, store, ManualClock()) as served:
            assert served.port is not None
            assert await _status(served.port, _client_context(pki, with_certificate=False)) == 200
            with pytest.raises(aiohttp.ClientError):  # plain HTTP to a TLS port
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://127.0.0.1:{served.port}/api/v1/status"),
                ):
                    pass
        mtls = api_server.api_settings(db, **tls, QINGLONG_API_CLIENT_CA_FILE=str(pki / "ca.pem"))
        async with api_server.serving(mtls, store, ManualClock()) as served:
            assert served.port is not None
            with pytest.raises(aiohttp.ClientError):
                await _status(served.port, _client_context(pki, with_certificate=False))
            assert await _status(served.port, _client_context(pki, with_certificate=True)) == 200
    finally:
        await store.close()


def test_a_key_that_does_not_match_is_one_line_naming_the_settings(pki: Path) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        web_server.tls_context(pki / "server.pem", pki / "client.key", None)
    assert "QINGLONG_API_TLS_CERT_FILE/QINGLONG_API_TLS_KEY_FILE" in str(caught.value)
    assert "\n" not in str(caught.value)
