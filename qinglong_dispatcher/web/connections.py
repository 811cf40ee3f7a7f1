"""Connections of the API listener: a limit, and a deadline for every idle or slow one.

A connection must deliver a request's complete headers within the read timeout of its start
(or of its previous response): an idle socket or a slowloris dribbling bytes is closed then,
whatever it sent. At the connection limit a new connection closes the oldest one that is
waiting for headers (an idle or slow one, never one whose request is in progress); when every
connection has a request in progress, the new one gets a 503 and is closed. Nothing here
touches the store: a hostile client costs a file descriptor for at most the read timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import structlog
from aiohttp import http_exceptions, web

from qinglong_dispatcher.lifecycle import metrics
from qinglong_dispatcher.web import problems

log = structlog.get_logger("qinglong_dispatcher.api")

MAX_FIELD_BYTES: Final = 8190
"""A header line's cap (name and value); `MAX_REQUEST_LINE_BYTES` differs from it so that a
parser refusal names which one was exceeded."""
MAX_REQUEST_LINE_BYTES: Final = 8192
MAX_HEADERS: Final = 64


def headers_too_large(exc: BaseException | None) -> bool:
    """Whether aiohttp refused a request for its headers' size (a line over `MAX_FIELD_BYTES`,
    or more than `MAX_HEADERS` of them): RFC 6585's 431, where aiohttp answers 400 for both."""
    if isinstance(exc, http_exceptions.LineTooLong):
        return len(exc.args) > 1 and exc.args[1] == MAX_FIELD_BYTES
    if isinstance(exc, http_exceptions.BadHttpMessage):
        return exc.message.startswith("Too many headers")
    return False


class Gate:
    """The open connections, oldest first, and the limit on them."""

    def __init__(self, *, limit: int, the_metrics: metrics.Metrics) -> None:
        self.limit = limit
        self._metrics = the_metrics
        self._open: dict[Connection, None] = {}
        self._closing = False

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, connection: Connection) -> bool:
        """Take `connection` in, closing the oldest waiting one at the limit; False when every
        slot has a request in progress, or once the listener is closing."""
        if self._closing:
            return False
        if len(self._open) >= self.limit:
            victim = next((c for c in self._open if c.busy == 0), None)
            if victim is None:
                self._metrics.record_api_connection_shed()
                return False
            self.release(victim)
            victim.shed()
        self._open[connection] = None
        return True

    def release(self, connection: Connection) -> None:
        """`connection` is gone (idempotent)."""
        self._open.pop(connection, None)

    def close_all(self) -> None:
        """Close every connection waiting for a request, and every one that arrives from now
        on (shutdown): a connection the listener accepted just before it closed reaches
        `connection_made` a few loop turns later, after the server took its list of
        connections to shut down, and would otherwise stay open until the process ends."""
        self._closing = True
        for connection in list(self._open):
            if connection.busy == 0:
                connection.force_close()

    def close_remaining(self) -> None:
        """Close every connection still open, its request in progress or not (the end of the
        shutdown grace)."""
        self._closing = True
        for connection in list(self._open):
            self.release(connection)
            connection.force_close()


class Connection(web.RequestHandler):
    """aiohttp's request handler with the gate and the header deadline."""

    def __init__(
        self,
        manager: web.Server,
        *,
        gate: Gate,
        read_timeout_s: float,
        the_metrics: metrics.Metrics,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate
        self._read_timeout_s = read_timeout_s
        self._metrics = the_metrics
        self._deadline: asyncio.TimerHandle | None = None
        self.busy = 0
        """Requests of this connection in progress (0: it waits for one)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._gate.admit(self):
            assert isinstance(transport, asyncio.Transport)
            transport.write(problems.raw_503())
            self.force_close()
            return
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._gate.release(self)
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._read_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.busy == 0:
            self.shed()

    def shed(self) -> None:
        """Close this idle or slow connection (the limit or its deadline)."""
        self._metrics.record_api_connection_shed()
        self.force_close()

    def request_started(self) -> None:
        """Headers of a request arrived: no deadline while it runs."""
        self.busy += 1
        self._disarm()

    def request_finished(self) -> None:
        """A response went out: the next request has the read timeout again."""
        self.busy -= 1
        if self.busy == 0 and self.transport is not None:
            self._arm()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request aiohttp could not parse (or a fault outside every middleware): a problem,
        one log line, and the connection closed; never a traceback."""
        if headers_too_large(exc):
            status = 431
        code = {400: "malformed_request", 413: "body_too_large", 431: "headers_too_large"}.get(
            status, "internal" if status >= 500 else "malformed_request"
        )
        log.info("api.bad_request", status=status, error=exc.__class__.__name__ if exc else None)
        response = problems.response(code)
        response.force_close()
        return response
