"""`GET /api/v1/events`: Server-Sent Events read by a real client from a real listener, and the
dispatches a real daemon settles arriving on it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from qinglong_dispatcher import api, bootstrap, clock, ports
from qinglong_dispatcher.bootstrap import listeners
from qinglong_dispatcher.lifecycle import daemon
from qinglong_dispatcher.web import server as web_server
from tests.support import api_server
from tests.support.actions import submit_runs
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

POLICY = api.Policy(approval_ttl_ms=60_000, max_attempts=3)


@dataclasses.dataclass
class Served:
    """The API served over a SQLite store, and what the test writes through."""

    server: web_server.ApiServer
    store: ports.Store
    clock: ManualClock

    @property
    def port(self) -> int | None:
        return self.server.port

    async def aclose(self) -> None:
        await self.server.aclose()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Served]:
    db = tmp_path / "events.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(db, QINGLONG_API_MAX_CONNECTIONS="8")
    the_clock = ManualClock()
    try:
        async with api_server.serving(settings, store, the_clock, heartbeat_s=0.1) as served:
            yield Served(served, store, the_clock)
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


def _url(server: Served) -> str:
    return f"http://127.0.0.1:{server.port}/api/v1/events"


async def test_a_subscriber_gets_new_requests_settled_dispatches_and_heartbeats(
    server: Served,
) -> None:
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
        the_api = api.Api(server.store, server.clock, POLICY)
        plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
        waiting = await the_api.create_approval(
            "run.create", plan.to_canonical_dict(), requested_by="alice"
        )
        (consumed,) = await submit_runs(server.store, server.clock, 1, project="p")
        await make_dispatcher(server.store, server.clock).dispatch_batch()
        got = await _events(response, 3)
    requested = [e["data"] for e in got if e["event"] == "approval.requested"]
    settled = [e["data"] for e in got if e["event"] == "dispatch.settled"]
    by_id = {r["approval_request_id"]: r for r in requested}
    assert set(by_id) == {waiting.approval_request_id, consumed.approval_request_id}
    assert by_id[waiting.approval_request_id]["requested_by"] == "alice"
    assert [(s["dispatch_id"], s["status"], s["project_id"]) for s in settled] == [
        (consumed.dispatch_id, "succeeded", "p")
    ]
    ids = [int(e["id"]) for e in got]
    assert ids == list(range(ids[0], ids[0] + 3))


async def test_a_reconnecting_subscriber_gets_what_it_missed(server: Served) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(_url(server), headers=bearer(VIEWER)) as response,
    ):
        await response.content.readline()
        consumed = await submit_runs(server.store, server.clock, 3, project="p")
        first = await _events(response, 3)
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            _url(server), headers={**bearer(VIEWER), "Last-Event-ID": first[0]["id"]}
        ) as response,
    ):
        got = await _events(response, 2)
    assert {e["data"]["approval_request_id"] for e in first} == {
        c.approval_request_id for c in consumed
    }
    assert [e["data"] for e in got] == [e["data"] for e in first[1:]]


async def test_streams_are_bounded_and_need_a_token(server: Served) -> None:
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


async def test_closing_the_server_ends_every_stream(server: Served) -> None:
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
        parts.api = served = listeners.api_server(
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
                got = await _events(response, 10)  # five requests, five settled
            the_daemon.request_stop()
    finally:
        await store.close()
    settled = [e["data"] for e in got if e["event"] == "dispatch.settled"]
    assert {e["dispatch_id"] for e in settled} == {c.dispatch_id for c in consumed}
    assert {e["status"] for e in settled} == {"succeeded"}
