"""The aiohttp sender of `http.request` against a real server on 127.0.0.1: exact bytes, one
request per send, and every answer classified (no redirect followed, no body kept).

The `Downstream` server here is shared with the handler and evidence tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.actions.http_request import receivers, send
from qinglong_dispatcher.actions.http_request import request as http

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]
BIG = 3 * 1024 * 1024


@dataclasses.dataclass
class Seen:
    """One request the server received."""

    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


class Downstream:
    """A recording server: each request takes the next scripted answer (default 200)."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.script: list[Answer] = []
        self.release = asyncio.Event()
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.seen.append(Seen(request.method, request.path_qs, headers, body))
        answer = self.script.pop(0) if self.script else status(200, b'{"ok":true}')
        return await answer(request)

    def then(self, *answers: Answer) -> None:
        self.script.extend(answers)

    def stall(self) -> Answer:
        async def answer(request: web.Request) -> web.StreamResponse:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), 5)
            return web.Response(status=200)

        return answer


def status(code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Answer:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=code, body=body, headers=headers)

    return answer


async def reset(request: web.Request) -> web.StreamResponse:
    assert request.transport is not None
    request.transport.abort()
    return web.Response(status=200)


async def big(request: web.Request) -> web.StreamResponse:
    return web.Response(status=200, body=b"x" * BIG)


@contextlib.asynccontextmanager
async def downstream() -> AsyncIterator[Downstream]:
    """The server on a free port of 127.0.0.1, stopped (stalls released) afterwards."""
    server = Downstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        server.release.set()
        await runner.cleanup()


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def receiver_table(base_url: str, **extra: Any) -> dict[str, Any]:
    """A receiver table with short timeouts for tests."""
    table: dict[str, Any] = {
        "base_url": base_url,
        "methods": ["GET", "POST", "PUT"],
        "path_prefixes": ["/hooks"],
        "connect_timeout_seconds": 0.5,
        "read_timeout_seconds": 0.3,
        "total_timeout_seconds": 1.0,
        "keep_headers": ["x-request-id"],
    }
    table.update(extra)
    return table


def receiver_set(base_url: str, **extra: Any) -> receivers.ReceiverSet:
    """One receiver `hooks` at `base_url`."""
    return receivers.parse(
        {"receivers": {"hooks": receiver_table(base_url, **extra)}}, source="test.toml"
    )


def plan_data(**fields: Any) -> dict[str, Any]:
    """A valid plan mapping (a POST of a small JSON body)."""
    data: dict[str, Any] = {
        "schemaVersion": 1,
        "actionRef": "act-1",
        "projectId": "p1",
        "receiver": "hooks",
        "method": "POST",
        "path": "/hooks/orders",
        "query": [["b", "2 3"], ["a", "1"]],
        "headers": [["x-trace", "t-1"]],
        "body": "eyJvcmRlciI6IDQyfQ==",  # {"order": 42}
        "contentType": "application/json",
    }
    data.update(fields)
    return data


def prepared_for(receiver: receivers.Receiver, **fields: Any) -> http.PreparedRequest:
    plan = plan_model.HttpRequestPlan.model_validate(plan_data(**fields))
    return http.build(
        receiver, plan, idempotency_key="d-1", credentials=http.Credentials(), now_s=1
    )


@pytest.fixture
async def server() -> AsyncIterator[Downstream]:
    async with downstream() as running:
        yield running


@pytest.fixture
async def sender() -> AsyncIterator[send.Sender]:
    the_sender = send.Sender()
    try:
        yield the_sender
    finally:
        await the_sender.aclose()


def hooks(server: Downstream, **extra: Any) -> receivers.Receiver:
    found = receiver_set(server.base_url, **extra).get("hooks")
    assert found is not None
    return found


async def test_the_bytes_sent_are_the_plans_exactly(
    server: Downstream, sender: send.Sender
) -> None:
    server.then(status(201, b"created", {"X-Request-Id": "r-9", "Idempotency-Replayed": "true"}))
    outcome = await sender.send(hooks(server), prepared_for(hooks(server)))
    assert (outcome.kind, outcome.code, outcome.status) == (
        http.OutcomeKind.ACCEPTED,
        "http_201",
        201,
    )
    (seen,) = server.seen
    assert seen.method == "POST"
    assert seen.path_qs == "/hooks/orders?b=2%203&a=1"
    assert seen.body == b'{"order": 42}'
    assert seen.headers["idempotency-key"] == '"d-1"'
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-trace"] == "t-1"
    assert "accept-encoding" not in seen.headers
    assert outcome.body_digest == hashlib.sha256(b"created").hexdigest()
    assert (outcome.body_bytes, outcome.replayed) == (7, True)
    assert outcome.headers == {"x-request-id": "r-9"}
    assert outcome.body is None


async def test_a_redirect_is_never_followed(server: Downstream, sender: send.Sender) -> None:
    server.then(status(302, headers={"Location": f"{server.base_url}/hooks/elsewhere"}))
    outcome = await sender.send(hooks(server), prepared_for(hooks(server)))
    assert (outcome.kind, outcome.code) == (http.OutcomeKind.UNCERTAIN, "http_redirect")
    assert [s.path_qs for s in server.seen] == ["/hooks/orders?b=2%203&a=1"]


@pytest.mark.parametrize(
    ("answer", "kind", "code"),
    [
        (status(400), http.OutcomeKind.REFUSED, "http_400"),
        (status(422), http.OutcomeKind.REFUSED, "http_422"),
        (status(404), http.OutcomeKind.UNCERTAIN, "http_404"),
        (status(409), http.OutcomeKind.IN_FLIGHT, "http_409"),
        (status(500), http.OutcomeKind.UNCERTAIN, "http_500"),
        (big, http.OutcomeKind.UNCERTAIN, "response_too_large"),
    ],
)
async def test_each_status_is_classified_by_what_it_proves(
    server: Downstream, sender: send.Sender, answer: Answer, kind: http.OutcomeKind, code: str
) -> None:
    server.then(answer)
    outcome = await sender.send(hooks(server), prepared_for(hooks(server)))
    assert (outcome.kind, outcome.code) == (kind, code)


async def test_a_reset_after_the_request_is_uncertain_and_never_resent(
    server: Downstream, sender: send.Sender
) -> None:
    # PUT is idempotent to aiohttp, which would resend it once on a dropped connection.
    server.then(reset, status(200))
    outcome = await sender.send(hooks(server), prepared_for(hooks(server), method="PUT"))
    assert (outcome.kind, outcome.code) == (http.OutcomeKind.UNCERTAIN, "connection_reset")
    assert len(server.seen) == 1


async def test_a_read_timeout_after_sending_is_uncertain(
    server: Downstream, sender: send.Sender
) -> None:
    server.then(server.stall())
    outcome = await sender.send(hooks(server), prepared_for(hooks(server)))
    assert (outcome.kind, outcome.code) == (http.OutcomeKind.UNCERTAIN, "read_timeout")
    assert len(server.seen) == 1


async def test_a_refused_connection_is_not_sent(sender: send.Sender) -> None:
    receiver = receiver_set(f"http://127.0.0.1:{free_port()}").get("hooks")
    assert receiver is not None
    outcome = await sender.send(receiver, prepared_for(receiver))
    assert (outcome.kind, outcome.code) == (http.OutcomeKind.NOT_SENT, "connect_failed")


async def test_a_tls_handshake_failure_is_not_sent(server: Downstream, sender: send.Sender) -> None:
    # A plain HTTP server answers the TLS hello with garbage: the handshake fails before a
    # byte of the request is written.
    receiver = receiver_set(f"https://127.0.0.1:{server.port}").get("hooks")
    assert receiver is not None
    outcome = await sender.send(receiver, prepared_for(receiver))
    assert outcome.kind is http.OutcomeKind.NOT_SENT
    assert server.seen == []


async def test_an_evidence_lookup_keeps_the_bounded_body_in_memory_only(
    server: Downstream, sender: send.Sender
) -> None:
    server.then(status(200, b'{"status":"completed"}'))
    outcome = await sender.send(hooks(server), prepared_for(hooks(server)), keep_body=True)
    assert outcome.body == b'{"status":"completed"}'
    assert "completed" not in repr(outcome)
    assert "body" not in outcome.receipt("hooks") or outcome.receipt("hooks").get("body") is None
