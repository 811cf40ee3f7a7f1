"""A slow or hostile client never stalls the API or dispatching: idle and slowloris connections
are closed by the read timeout, the connection limit makes room by closing the oldest idle one,
and a drain of thousands of dispatches keeps its rate while 200 idle sockets and a slowloris
attack the listener of the same daemon (real sockets on 127.0.0.1, a real SQLite store)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest

from qinglong_dispatcher import api, bootstrap, clock
from qinglong_dispatcher.bootstrap import listeners
from qinglong_dispatcher.lifecycle import daemon
from tests.support import api_server
from tests.support.api_server import VIEWER, bearer
from tests.support.clock import ManualClock
from tests.support.daemon import free_port

READ_TIMEOUT_S = 0.5


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Any]:
    db = tmp_path / "api.db"
    store = await api_server.open_store(db)
    settings = api_server.api_settings(
        db,
        QINGLONG_API_READ_TIMEOUT_SECONDS=str(READ_TIMEOUT_S),
        QINGLONG_API_MAX_CONNECTIONS="4",
    )
    try:
        async with api_server.serving(settings, store, ManualClock()) as served:
            yield served
    finally:
        await store.close()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Whatever the server sent before it closed the connection (fails if it stays open)."""
    return await asyncio.wait_for(reader.read(), seconds)


async def _good_request(port: int) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/api/v1/status", headers=bearer(VIEWER)) as response,
    ):
        return response.status


async def test_an_idle_connection_is_closed_after_the_read_timeout(server: Any) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.monotonic()
    assert await _closed_within(reader, READ_TIMEOUT_S + 2) == b""
    assert time.monotonic() - started >= READ_TIMEOUT_S * 0.9
    writer.close()


async def test_a_slowloris_is_closed_after_the_read_timeout_though_it_keeps_sending(
    server: Any,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.monotonic()
    request = b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    closed = False
    try:
        for byte in request:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.02)
            if reader.at_eof() or time.monotonic() - started > READ_TIMEOUT_S + 2:
                break
    except ConnectionError:
        closed = True
    closed = closed or reader.at_eof()
    assert closed, "the slowloris connection is still open"
    assert time.monotonic() - started < READ_TIMEOUT_S + 2
    writer.close()


async def test_a_keep_alive_connection_idle_after_its_response_is_closed_too(
    server: Any,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        f"GET /api/v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {VIEWER}\r\n\r\n".encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    rest = await _closed_within(reader, READ_TIMEOUT_S + 2)  # the body, then the close
    assert rest.startswith(b"{")
    writer.close()


async def test_at_the_limit_the_oldest_idle_connection_makes_room_for_a_good_client(
    server: Any,
) -> None:
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
    await asyncio.sleep(0.05)
    assert server.open_connections == 4
    assert await _good_request(server.port) == 200
    oldest_reader = idle[0][0]
    assert await _closed_within(oldest_reader, 1) == b""
    assert all(not reader.at_eof() for reader, _ in idle[2:])
    for _, writer in idle:
        writer.close()


# -- the drain under attack ------------------------------------------------------------------

DISPATCHES = 6000
IDLE_SOCKETS = 200
SLOWLORIS = 10

ATTACKER = """
import socket, sys, threading, time
port, idle, slow = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def idle_socket():
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port))
            s.recv(1024)  # blocks until the server closes it
            s.close()
        except OSError:
            pass
        time.sleep(0.2)
def slowloris():
    request = b"GET /api/v1/status HTTP/1.1\\r\\nHost: x\\r\\nX-Slow: " + b"a" * 10000
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port))
            for i in range(len(request)):
                s.sendall(request[i:i + 1])
                time.sleep(0.05)
        except OSError:
            pass
        time.sleep(0.2)
for target, n in ((idle_socket, idle), (slowloris, slow)):
    for _ in range(n):
        threading.Thread(target=target, daemon=True).start()
print("attacking", flush=True)
time.sleep(3600)
"""


async def _seed(store: Any, settings: Any, n: int) -> None:
    the_api = bootstrap.build_api(settings, store, clock.SystemClock())
    for start in range(0, n, 1000):
        plans = [
            api.run_create_plan({"projectId": "drain", "taskId": f"t-{i}", "taskRevision": i})
            for i in range(start, min(n, start + 1000))
        ]
        await the_api.submit(plans, requested_by="cli", approved_by="cli")


async def _drain(
    tmp_path: Path, *, attack: bool, dispatches: int = DISPATCHES
) -> tuple[float, list[int], float]:
    """Seed, then run the daemon until every dispatch succeeded: (dispatches/s, the good
    client's statuses, connections the listener shed). The attacker connects from its own
    process and retries every 0.2 s, so it is in place a moment after the daemon binds."""
    db = tmp_path / f"drain-{'attack' if attack else 'quiet'}-{dispatches}.db"
    store = await api_server.open_store(db)
    port = free_port()
    settings = api_server.api_settings(
        db,
        QINGLONG_API_LISTEN=f"127.0.0.1:{port}",
        QINGLONG_CADENCE_SECONDS="0.05",
        QINGLONG_PAGE_SIZE="64",
        QINGLONG_MAX_PAGES_PER_TICK="10000",
        QINGLONG_API_READ_TIMEOUT_SECONDS="2",
    )
    statuses: list[int] = []
    attacker: anyio.abc.Process | None = None
    try:
        await _seed(store, settings, dispatches)
        parts = bootstrap.build_daemon_parts(settings, store, clock.SystemClock())
        parts.api = listeners.api_server(
            settings,
            store,
            clock.SystemClock(),
            parts.metrics,
            parts.health,
            authenticator=api_server.DictAuthenticator(),
        )
        the_daemon = daemon.Daemon(parts)
        if attack:
            attacker = await anyio.open_process(
                [sys.executable, "-c", ATTACKER, str(port), str(IDLE_SOCKETS), str(SLOWLORIS)],
                stdout=subprocess.PIPE,
            )
            assert attacker.stdout is not None
            assert (await attacker.stdout.receive()).strip() == b"attacking"
        async with anyio.create_task_group() as tg:
            began = time.monotonic()
            tg.start_soon(the_daemon.run)
            while True:
                await anyio.sleep(0.25)
                counts = await store.counts(now_ms=clock.SystemClock().now_ms())
                done = sum(n for s, n in counts.executions.items() if s.value == "succeeded")
                if attack and len(statuses) < 2 * (time.monotonic() - began):
                    with anyio.fail_after(5):
                        statuses.append(await _good_request(port))
                if done == dispatches:
                    break
            elapsed = time.monotonic() - began
            the_daemon.request_stop()
        shed = _sample(parts.metrics.render(), "qinglong_dispatcher_api_connections_shed_total")
        return dispatches / elapsed, statuses, shed
    finally:
        if attacker is not None:
            attacker.kill()
            await attacker.wait()
            await attacker.aclose()
        await store.close()


def _sample(exposition: bytes, name: str) -> float:
    for line in exposition.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no sample {name}")


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_drain_keeps_its_rate_while_idle_sockets_and_a_slowloris_attack_the_api(
    tmp_path: Path,
) -> None:
    await _drain(tmp_path, attack=False, dispatches=500)  # warm-up: imports, first pages
    quiet, _, _ = await _drain(tmp_path, attack=False)
    attacked, statuses, shed = await _drain(tmp_path, attack=True)
    print(
        f"drain of {DISPATCHES}: {quiet:.0f}/s quiet, {attacked:.0f}/s attacked "
        f"({attacked / quiet:.2f}x); {len(statuses)} good requests, {shed:.0f} connections shed"
    )
    assert shed > IDLE_SOCKETS - 64, "the attack did not reach the listener"
    assert statuses, "the good client never asked"
    assert set(statuses) == {200}, statuses
    assert attacked >= 0.5 * quiet, (quiet, attacked)
