"""The API listener the daemon owns: bound at start, served in its task group, closed on stop.

TCP (TLS unless loopback, client certificates with a CA) or a unix socket (mode 0660). The
connections are aiohttp's, with the gate and deadlines of `connections`; the TLS handshake
has the read timeout too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import stat
from pathlib import Path
from typing import Final

import anyio
import structlog
from aiohttp import web

from qinglong_dispatcher.config import listen_address
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.web import app, auth, connections, context, feed

log = structlog.get_logger("qinglong_dispatcher.api")

SHUTDOWN_GRACE_S: Final = 3.0
"""Requests in progress at the stop get this long to finish."""


def tls_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    """The server's TLS context (1.2 at least); with `client_ca`, a client certificate chaining
    to it is required. `ConfigurationError` naming the setting when a file does not load."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise errors.ConfigurationError(
            f"QINGLONG_API_TLS_CERT_FILE/QINGLONG_API_TLS_KEY_FILE: cannot load {cert.name} "
            f"and {key.name} ({exc.__class__.__name__})"
        ) from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise errors.ConfigurationError(
                f"QINGLONG_API_CLIENT_CA_FILE: cannot load {client_ca.name} "
                f"({exc.__class__.__name__})"
            ) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ApiServer:
    """`lifecycle.daemon.Service` for the control-plane API."""

    def __init__(
        self,
        *,
        address: listen_address.ListenAddress,
        ctx: context.Context,
        max_connections: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._ctx = ctx
        self._tls = tls
        self._gate = connections.Gate(limit=max_connections, the_metrics=ctx.metrics)
        self._runner: web.AppRunner | None = None
        self._handlers: web.Server | None = None
        self._server: asyncio.Server | None = None
        self._closed = False
        self.port: int | None = None
        """The bound TCP port (port 0 picks one), after `start`."""

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return len(self._gate)

    def _connection(self) -> connections.Connection:
        # The handler server is kept apart from the runner, which drops it at cleanup: a
        # connection accepted just before the listener closed still gets a protocol, which the
        # closing gate refuses and closes, instead of a factory error leaving its socket open.
        assert self._handlers is not None
        return connections.Connection(
            self._handlers,
            loop=asyncio.get_running_loop(),
            gate=self._gate,
            read_timeout_s=self._ctx.read_timeout_s,
            the_metrics=self._ctx.metrics,
            keepalive_timeout=self._ctx.read_timeout_s,
            max_line_size=connections.MAX_REQUEST_LINE_BYTES,
            max_field_size=connections.MAX_FIELD_BYTES,
            max_headers=connections.MAX_HEADERS,
            access_log=None,
            lingering_time=1.0,
        )

    async def start(self) -> None:
        """Bind; `ConfigurationError` naming `QINGLONG_API_LISTEN` when it cannot."""
        runner = web.AppRunner(
            app.build(self._ctx),
            handle_signals=False,
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE_S,
        )
        await runner.setup()
        self._runner = runner
        self._handlers = runner.server
        loop = asyncio.get_running_loop()
        try:
            if self.address.path is not None:
                self._server = await self._bind_unix(self.address.path)
            else:
                self._server = await loop.create_server(
                    self._connection,
                    self.address.host,
                    self.address.port,
                    ssl=self._tls,
                    ssl_handshake_timeout=self._ctx.read_timeout_s if self._tls else None,
                    backlog=128,
                    reuse_address=True,
                )
        except OSError as exc:
            await runner.cleanup()
            self._runner = None
            raise errors.ConfigurationError(
                f"QINGLONG_API_LISTEN: cannot listen on {self.address} "
                f"({exc.strerror or exc.__class__.__name__})"
            ) from None
        sockets = self._server.sockets
        if self.address.path is None and sockets:
            self.port = int(sockets[0].getsockname()[1])
        if isinstance(self._ctx.authenticator, auth.NoTokens):
            log.warning("api.no_token_store", message="no token store: every request is 401")
        log.info(
            "api.listening",
            address=str(self.address),
            port=self.port,
            tls=self._tls is not None,
            client_certificates=self._tls is not None
            and self._tls.verify_mode == ssl.CERT_REQUIRED,
        )

    async def _bind_unix(self, path: Path) -> asyncio.Server:
        # A socket file left by a process that is gone is replaced; a live one is refused.
        if path.is_socket() and not _answers(path):  # noqa: ASYNC240 - one stat at startup
            path.unlink()  # noqa: ASYNC240 - likewise
        server = await asyncio.get_running_loop().create_unix_server(
            self._connection, str(path), backlog=128
        )
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IWGRP)
        return server

    async def serve(self, stop: anyio.Event) -> None:
        """Serve (and feed the event stream) until `stop`, then close gracefully (bounded,
        whatever cancels the daemon)."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed.Feed(self._ctx.store, self._ctx.clock, self._ctx.hub).run)
                await stop.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.aclose()

    async def aclose(self) -> None:
        """Stop accepting, end the event streams, give requests in progress a grace period, then
        close every connection still open."""
        if self._closed:
            return
        self._closed = True
        self._ctx.hub.close()
        if self._server is not None:
            self._server.close()
        self._gate.close_all()
        if self._runner is not None:
            try:
                with anyio.move_on_after(SHUTDOWN_GRACE_S + 1):
                    await self._runner.cleanup()
            finally:
                # A request still running past the grace (a cleanup the deadline cut short, or
                # one that raised) keeps its connection open otherwise, until the process ends.
                self._gate.close_remaining()
        if self.address.path is not None:
            with contextlib.suppress(OSError):
                self.address.path.unlink()
        log.info("api.stopped")


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        probe.settimeout(0.5)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
