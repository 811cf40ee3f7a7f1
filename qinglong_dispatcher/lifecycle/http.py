"""The metrics and health listener: `/metrics`, `/healthz`, `/readyz` on one small HTTP server."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus, server
from urllib import parse

import structlog

from qinglong_dispatcher.lifecycle import metrics

log = structlog.get_logger("qinglong_dispatcher.http")

STALE_CADENCES = 3.0
"""The loop counts as dead when no tick finished within this many cadences."""


class Health:
    """Flags the daemon sets and the listener reads; every access holds one lock."""

    def __init__(
        self,
        *,
        cadence_s: float,
        stale_after_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.stale_after_s = STALE_CADENCES * cadence_s if stale_after_s is None else stale_after_s
        # Starting counts as a beat: the first tick gets the same allowance as any other.
        self._last_beat = clock()
        self._reachable = False
        self._migrated = False
        self._draining = False
        self._unsafe = ""
        """Why commits are not safe against a primary loss now (empty: they are)."""
        self._unwritable = ""
        """Why the store cannot be written now (empty: nothing known)."""

    def beat(self) -> None:
        """The loop made progress (a tick ended, successful or not): liveness is renewed."""
        with self._lock:
            self._last_beat = self._clock()

    def set_store(self, *, reachable: bool, migrated: bool | None = None) -> None:
        """Record what the last store access showed; `migrated` unchanged when None."""
        with self._lock:
            self._reachable = reachable
            if migrated is not None:
                self._migrated = migrated

    def set_durability(self, problem: str = "") -> None:
        """Record the last durability re-check (`QINGLONG_REQUIRE_SYNC_STANDBY`); empty: ok."""
        with self._lock:
            self._unsafe = problem

    def set_writes(self, problem: str = "") -> None:
        """Record why the last tick could not write, or why a write would fail (empty: ok)."""
        with self._lock:
            self._unwritable = problem

    def set_draining(self, draining: bool = True) -> None:
        """Shutdown began: readiness fails so no new traffic or rollout waits on this process."""
        with self._lock:
            self._draining = draining

    def alive(self) -> tuple[bool, str]:
        """(ok, reason): whether a tick finished within `stale_after_s`."""
        with self._lock:
            age = self._clock() - self._last_beat
        if age > self.stale_after_s:
            return False, f"no tick for {age:.1f}s (limit {self.stale_after_s:g}s)"
        return True, "alive"

    def ready(self) -> tuple[bool, str]:
        """(ok, reason): store reachable, migrated and writable, durable as required, not
        draining."""
        with self._lock:
            reachable, migrated, draining = self._reachable, self._migrated, self._draining
            unsafe, unwritable = self._unsafe, self._unwritable
        if draining:
            return False, "draining"
        if not reachable:
            return False, "store unreachable"
        if not migrated:
            return False, "store not migrated"
        if unwritable:
            return False, f"store not writable: {unwritable}"
        if unsafe:
            return False, unsafe
        return True, "ready"


class _Server(server.ThreadingHTTPServer):
    """Request threads are daemons and never joined: a stuck scraper cannot delay exit."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], the_metrics: metrics.Metrics, health: Health):
        self.metrics = the_metrics
        self.health = health
        super().__init__(address, _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        """One log event instead of socketserver's traceback on stderr (a scraper hung up)."""
        log.warning("http.request_failed", error=repr(sys.exc_info()[1]))


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(server.BaseHTTPRequestHandler):
    # A client that sends nothing for this long loses its thread.
    timeout = 5
    server_version = "qinglong-dispatcher"
    sys_version = ""

    def do_GET(self) -> None:
        assert isinstance(self.server, _Server)
        path = parse.urlsplit(self.path).path
        if path == "/metrics":
            self._send(HTTPStatus.OK, self.server.metrics.render(), metrics.CONTENT_TYPE)
        elif path == "/healthz":
            self._send_check(*self.server.health.alive())
        elif path == "/readyz":
            self._send_check(*self.server.health.ready())
        else:
            self._send_check(False, "not found", status=HTTPStatus.NOT_FOUND)

    def _send_check(self, ok: bool, reason: str, status: HTTPStatus | None = None) -> None:
        body = json.dumps({"ok": ok, "reason": reason}).encode() + b"\n"
        if status is None:
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
        self._send(status, body, "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """No access log: probes every few seconds would drown the daemon's own events."""


class Listener:
    """Serves the Metrics registry and the Health flags from one daemon thread."""

    def __init__(
        self, host: str, port: int, *, the_metrics: metrics.Metrics, health: Health
    ) -> None:
        self._host = host
        self._port = port
        self._metrics = the_metrics
        self._health = health
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> int:
        """Bind and serve; returns the bound port (port 0 picks a free one). OSError if taken."""
        if self._server is not None:
            raise RuntimeError("listener already started")
        server_class = _Server6 if ":" in self._host else _Server
        self._server = server_class((self._host, self._port), self._metrics, self._health)
        port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._serve, name="qinglong-metrics", daemon=True)
        self._thread.start()
        log.info("http.listening", host=self._host, port=port)
        return port

    def _serve(self) -> None:
        assert self._server is not None
        # handle_request() sleeps in select() until a connection arrives: an idle daemon does
        # not wake up here. serve_forever() would poll twice a second instead.
        while not self._stopping.is_set():
            self._server.handle_request()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop serving and close the socket; safe to call twice or before `start`."""
        srv, thread = self._server, self._thread
        if srv is None or thread is None or self._stopping.is_set():
            return
        self._stopping.set()
        # Wake the select() above with one connection of our own.
        host, port = srv.server_address[:2]
        wake_host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(str(host), str(host))
        with contextlib.suppress(OSError):
            socket.create_connection((wake_host, int(port)), timeout=timeout_s).close()
        thread.join(timeout_s)
        srv.server_close()
        log.info("http.stopped")
