"""A plain-HTTP receiver named by a host name is resolved once per process and pinned: re-pointing
the name (here through the sender's resolver hook, as a DNS answer that changes) never moves
its clear-text sends. Two real HTTP servers listen on the same port of 127.0.0.1 and 127.0.0.2;
the name first points at the first one, then at the second."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp.abc
import pytest
from aiohttp import web

from qinglong_dispatcher.actions.http_request import receivers, send
from qinglong_dispatcher.actions.http_request import request as http
from tests.unit.test_http_request_send import prepared_for, receiver_table

NAME = "orders.pinning.test"


class Names:
    """A resolver hook over a table the test re-points, counting its lookups."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        assert host == NAME
        self.lookups += 1
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]


def _shared_port() -> int:
    """A port free on both 127.0.0.1 and 127.0.0.2 (the whole 127/8 is loopback on Linux)."""
    for _ in range(50):
        with socket.socket() as one, socket.socket() as two:
            one.bind(("127.0.0.1", 0))
            port: int = one.getsockname()[1]
            try:
                two.bind(("127.0.0.2", port))
            except OSError:
                continue
            return port
    raise AssertionError("no port free on both loopback addresses")


@contextlib.asynccontextmanager
async def _servers(port: int) -> AsyncIterator[dict[str, list[str]]]:
    """Two servers on `port`, each recording the paths it received; every answer closes its
    connection, so each send opens a new one (and resolves the name again, unless pinned)."""
    seen: dict[str, list[str]] = {"127.0.0.1": [], "127.0.0.2": []}
    runners = []
    for address in seen:

        async def handle(request: web.Request, address: str = address) -> web.StreamResponse:
            seen[address].append(request.path)
            response = web.Response(status=200, body=b"{}")
            response.force_close()
            return response

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, address, port).start()
        runners.append(runner)
    try:
        yield seen
    finally:
        for runner in runners:
            await runner.cleanup()


def _receiver(port: int, scheme_host: str) -> receivers.Receiver:
    table = receiver_table(f"{scheme_host}:{port}", allow_plain_http=True)
    found = receivers.parse({"receivers": {"hooks": table}}, source="test.toml").get("hooks")
    assert found is not None
    return found


async def test_a_plain_http_name_re_pointed_after_the_first_send_keeps_its_first_address() -> None:
    port = _shared_port()
    names = Names("127.0.0.1")
    sender = send.Sender(resolve=names.resolve, pins={})
    receiver = _receiver(port, f"http://{NAME}")
    try:
        async with _servers(port) as seen:
            first = await sender.send(receiver, prepared_for(receiver))
            assert first.kind is http.OutcomeKind.ACCEPTED, first
            names.address = "127.0.0.2"  # the name is re-pointed
            for _ in range(3):
                again = await sender.send(receiver, prepared_for(receiver))
                assert again.kind is http.OutcomeKind.ACCEPTED, again
            # A session closed and made again (the sender reused) keeps the pin too.
            await sender.aclose()
            after = await sender.send(receiver, prepared_for(receiver))
            assert after.kind is http.OutcomeKind.ACCEPTED, after
            assert len(seen["127.0.0.1"]) == 5
            assert seen["127.0.0.2"] == []
    finally:
        await sender.aclose()
    assert names.lookups == 1


async def test_the_senders_of_one_process_share_a_receiver_s_pin() -> None:
    # The handler and recovery's evidence each hold a sender: a lookup after the name moved
    # must reach the address the send reached, not the new one.
    port = _shared_port()
    names = Names("127.0.0.1")
    executes = send.Sender(resolve=names.resolve)
    evidence = send.Sender(resolve=names.resolve)
    receiver = _receiver(port, f"http://{NAME}")
    try:
        async with _servers(port) as seen:
            sent = await executes.send(receiver, prepared_for(receiver))
            assert sent.kind is http.OutcomeKind.ACCEPTED, sent
            names.address = "127.0.0.2"
            looked_up = await evidence.send(receiver, prepared_for(receiver))
            assert looked_up.kind is http.OutcomeKind.ACCEPTED, looked_up
            assert (len(seen["127.0.0.1"]), len(seen["127.0.0.2"])) == (2, 0)
    finally:
        await executes.aclose()
        await evidence.aclose()
        send.PROCESS_PINS.pop((receiver.name, receiver.base_url), None)
    assert names.lookups == 1


async def test_pins_are_per_process_a_new_one_resolves_afresh() -> None:
    port = _shared_port()
    names = Names("127.0.0.2")
    sender = send.Sender(resolve=names.resolve, pins={})  # another process's pins: none yet
    receiver = _receiver(port, f"http://{NAME}")
    try:
        async with _servers(port) as seen:
            outcome = await sender.send(receiver, prepared_for(receiver))
            assert outcome.kind is http.OutcomeKind.ACCEPTED, outcome
            assert (len(seen["127.0.0.1"]), len(seen["127.0.0.2"])) == (0, 1)
    finally:
        await sender.aclose()


@pytest.mark.parametrize("scheme_host", ["http://127.0.0.1", "https://" + NAME])
def test_only_a_plain_http_host_name_is_pinned(scheme_host: str) -> None:
    # A literal address is never looked up; https proves the name on each connection.
    assert not send._pinned(_receiver(443, scheme_host))
    assert send._pinned(_receiver(80, f"http://{NAME}"))
