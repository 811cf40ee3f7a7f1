"""Roles and server faults on the API's own middlewares: a route above `viewer` refuses a viewer
403 and admits an operator; a handler's bug is a bare 500 problem, never a traceback or its
message. The routes are added for the test to the real application, served on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.web import app, auth, bodies, context
from tests.support import api_server
from tests.support.api_server import OPERATOR, VIEWER, bearer

BURST = 30


@auth.requires("operator")
async def _operator_only(request: web.Request) -> web.Response:
    return web.json_response({"principal": context.principal(request).principal})


@auth.requires("submitter")
async def _write(request: web.Request) -> web.Response:
    refused = auth.write_refusal(request)
    return refused if refused is not None else web.json_response({"written": True})


@auth.requires("submitter")
async def _echo(request: web.Request) -> web.Response:
    return web.json_response(await bodies.read_object(request))


@auth.requires("viewer")
async def _bug(request: web.Request) -> web.Response:
    raise RuntimeError("secret-in-a-message /var/lib/qinglong.db")


@auth.requires("viewer")
async def _store_down(request: web.Request) -> web.Response:
    raise errors.StoreUnavailable("cannot open /var/lib/secret-path.db: password=hunter2")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, context.Context]]:
    store: ports.Store = await api_server.open_store(tmp_path / "roles.db")
    ctx = api_server.small_context(store, api_server.DictAuthenticator(), burst=BURST)
    application = app.build(ctx)
    application.router.add_post("/test/operator", _operator_only)
    application.router.add_get("/test/bug", _bug)
    application.router.add_post("/test/write", _write)
    application.router.add_post("/test/echo", _echo)
    application.router.add_get("/test/store", _store_down)
    runner = web.AppRunner(application, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", ctx
    finally:
        await runner.cleanup()
        await store.close()


async def test_a_role_below_the_routes_is_403_and_the_principal_comes_from_the_token(
    served: tuple[str, context.Context],
) -> None:
    base, _ = served
    async with aiohttp.ClientSession() as session:
        async with session.post(base + "/test/operator", headers=bearer(VIEWER)) as response:
            assert response.status == 403
            body = await response.json(content_type="application/problem+json")
            assert body["type"] == "/problems/forbidden"
        # A request field naming a principal changes nothing: the server derives it.
        async with session.post(
            base + "/test/operator?principal=vera",
            headers={**bearer(OPERATOR), "X-Principal": "vera"},
            json={"principal": "vera"},
        ) as response:
            assert response.status == 200
            assert await response.json() == {"principal": "otto"}


async def test_a_bug_is_a_bare_500_and_a_store_fault_a_503_without_its_message(
    served: tuple[str, context.Context],
) -> None:
    base, _ = served
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/test/bug", headers=bearer(VIEWER)) as response:
            assert response.status == 500
            text = await response.text()
        assert json.loads(text)["type"] == "/problems/internal"
        assert "secret" not in text
        assert "Traceback" not in text
        async with session.get(base + "/test/store", headers=bearer(VIEWER)) as response:
            assert response.status == 503
            assert response.headers["Retry-After"] == "5"
            text = await response.text()
        assert json.loads(text)["code"] == "store_unavailable"
        assert "hunter2" not in text
        assert "secret-path" not in text


async def test_writes_are_rate_limited_per_principal(served: tuple[str, context.Context]) -> None:
    base, ctx = served
    async with aiohttp.ClientSession() as session:
        async with session.post(base + "/test/write", headers=bearer(VIEWER)) as response:
            assert response.status == 403
        statuses = []
        for _ in range(BURST + 1):
            async with session.post(base + "/test/write", headers=bearer(OPERATOR)) as response:
                statuses.append(response.status)
                retry_after = response.headers.get("Retry-After")
    assert statuses == [200] * BURST + [429]
    assert retry_after == "1"
    text = ctx.metrics.render().decode()
    assert 'qinglong_dispatcher_api_rate_limited_total{reason="writes"} 1.0' in text


async def test_a_body_is_one_json_object_under_the_cap_and_in_time(
    served: tuple[str, context.Context],
) -> None:
    base, _ = served
    url = base + "/test/echo"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, headers=bearer(OPERATOR), json={"a": 1}) as response:
            assert (response.status, await response.json()) == (200, {"a": 1})
        for data, field in ((b"[1]", "body"), (b"{", "body")):
            async with session.post(
                url, headers={**bearer(OPERATOR), "Content-Type": "application/json"}, data=data
            ) as response:
                body = await response.json(content_type="application/problem+json")
                assert (response.status, body["field"]) == (400, field)

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the cap while reading
            for _ in range(3):
                yield b" " * 600

        async with session.post(
            url, headers={**bearer(OPERATOR), "Content-Type": "application/json"}, data=chunked()
        ) as response:
            assert response.status == 413

    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            f"POST /test/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        ).encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert b" 408 " in head.split(b"\r\n")[0]
    assert b"Connection: close" in head
    assert b"/problems/request_timeout" in await asyncio.wait_for(reader.read(200), 5)
    writer.close()
