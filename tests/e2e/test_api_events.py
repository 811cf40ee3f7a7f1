"""`GET /api/v1/events`: Server-Sent Events read by a real client from a real listener, and the
dispatches a real daemon settles arriving on it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from qinglong_dispatcher import api, bootstrap, clock
from qinglong_dispatcher.lifecycle import daemon
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Any]:
    db = tmp_path / "events.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(db, QINGLONG_API_MAX_CONNECTIONS="8")
    try:
        async with api_server.serving(settings, store, ManualClock(), heartbeat_s=0.1) as served:
            yield served
    finally:
        await store.close()


async def _events(response: aiohttp.ClientResponse, n: int) -> list[dict[str, Any]]:
    """The next `n` events of a stream (comments and heartbeats skipped)."""
    found: list[dict[str, Any]] = []
    event: dict[str, Any] = {}
    with anyio.fail_after(10):
        while len(found) < n:
            line = (await response.content.readline()).decode().rstrip("\n")
            if line.startswith(("id: ", "event: ")):
                key, _, value = line.partition(": ")
                event[key] = value
            elif line.startswith("data: "):
                event["data"] = json.loads(line.removeprefix("data: "))
            elif line == "" and event:
                found.append(event)
                event = {}
    return found


def _url(server: Any) -> str:
    return f"http://127.0.0.1:{server.port}/api/v1/events"


async def test_a_subscriber_gets_settled_dispatches_and_heartbeats(server: Any) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(_url(server), headers=bearer(VIEWER)) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert (await response.content.readline()).startswith(b"retry: ")
        heartbeats = 0
        with anyio.fail_after(5):
            while heartbeats < 2:
                heartbeats += (await response.content.readline()) == b": heartbeat\n"
        server.settled([("d-1", "succeeded"), ("d-2", "blocked")])
        got = await _events(response, 2)
    assert [e["event"] for e in got] == ["dispatch.settled"] * 2
    assert [e["data"] for e in got] == [
        {"dispatch_id": "d-1", "status": "succeeded"},
        {"dispatch_id": "d-2", "status": "blocked"},
    ]
    assert int(got[1]["id"]) == int(got[0]["id"]) + 1


async def test_a_reconnecting_subscriber_gets_what_it_missed(server: Any) -> None:
    server.settled([("d-1", "succeeded"), ("d-2", "failed"), ("d-3", "succeeded")])
    async with (
        aiohttp.ClientSession() as session,
        session.get(_url(server), headers={**bearer(VIEWER), "Last-Event-ID": "1"}) as response,
    ):
        got = await _events(response, 2)
    assert [e["data"]["dispatch_id"] for e in got] == ["d-2", "d-3"]


async def test_streams_are_bounded_and_need_a_token(server: Any) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(_url(server)) as response:
            assert response.status == 401
        async with (
            session.get(_url(server), headers=bearer(VIEWER)) as first,
            session.get(_url(server), headers=bearer(VIEWER)) as second,
        ):
            assert (first.status, second.status) == (200, 200)
            async with session.get(_url(server), headers=bearer(VIEWER)) as third:
                assert third.status == 503
                assert third.headers["Retry-After"] == "5"
                body = await third.json(content_type="application/problem+json")
                assert body["type"] == "/problems/too_many_streams"


async def test_closing_the_server_ends_every_stream(server: Any) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(_url(server), headers=bearer(VIEWER)) as response,
    ):
        await response.content.readline()
        await server.aclose()
        with anyio.fail_after(5):
            while await response.content.readline():
                pass


@pytest.mark.timeout(60)
async def test_the_daemon_announces_the_dispatches_it_settles(tmp_path: Path) -> None:
    db = tmp_path / "daemon.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(db, QINGLONG_CADENCE_SECONDS="0.05")
    try:
        parts = bootstrap.build_daemon_parts(settings, store, clock.SystemClock())
        parts.api = served = bootstrap.build_api_server(
            settings,
            store,
            clock.SystemClock(),
            parts.metrics,
            parts.health,
            authenticator=api_server.DictAuthenticator(),
        )
        assert isinstance(served, web_server.ApiServer)
        the_daemon = daemon.Daemon(parts)
        async with anyio.create_task_group() as tg:
            tg.start_soon(the_daemon.run)
            with anyio.fail_after(10):
                # The port is known once the daemon bound it.
                while served.port is None:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            url = f"http://127.0.0.1:{served.port}/api/v1/events"
            async with (
                aiohttp.ClientSession() as session,
                session.get(url, headers=bearer(VIEWER)) as response,
            ):
                await response.content.readline()
                the_api = bootstrap.build_api(settings, store, clock.SystemClock())
                plans = [
                    api.run_create_plan({"projectId": "p", "taskId": f"t-{i}", "taskRevision": i})
                    for i in range(5)
                ]
                consumed = await the_api.submit(plans, requested_by="cli", approved_by="cli")
                got = await _events(response, 5)
            the_daemon.request_stop()
    finally:
        await store.close()
    assert {e["data"]["dispatch_id"] for e in got} == {c.dispatch_id for c in consumed}
    assert {e["data"]["status"] for e in got} == {"succeeded"}
