"""sd_notify without a dependency: READY, WATCHDOG, STATUS, STOPPING over `$NOTIFY_SOCKET`."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import structlog

log = structlog.get_logger("qinglong_dispatcher.systemd")


def _address(raw: str) -> str | None:
    """The socket address of `NOTIFY_SOCKET`: a path, or `@name` for the abstract namespace."""
    if raw.startswith("/"):
        return raw
    if raw.startswith("@") and len(raw) > 1:
        return "\0" + raw[1:]
    return None


def _watchdog_usec(environ: Mapping[str, str], pid: int) -> int | None:
    """`WATCHDOG_USEC` when it is meant for us (`WATCHDOG_PID` absent or our pid), else None."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    wanted = environ.get("WATCHDOG_PID")
    if wanted is not None:
        try:
            if int(wanted) != pid:
                return None
        except ValueError:
            return None
    return usec


def _one_line(text: str) -> str:
    # A newline would end the STATUS= field and start a bogus assignment.
    return " ".join(text.split())


class Notifier:
    """Tells systemd how the service is doing; a no-op when `NOTIFY_SOCKET` is absent.

    Sends never block (a non-blocking datagram) and never raise: a failure is logged once as
    `systemd.notify_failed`, and again only after a send has succeeded in between.
    """

    def __init__(self, environ: Mapping[str, str] | None = None, *, pid: int | None = None) -> None:
        env = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        raw = env.get("NOTIFY_SOCKET", "")
        self._address = _address(raw) if raw else None
        if raw and self._address is None:
            log.warning("systemd.notify_socket_unsupported", notify_socket=raw)
        usec = _watchdog_usec(env, pid) if self._address is not None else None
        self._watchdog_usec = usec
        self._socket: socket.socket | None = None
        self._failing = False

    @property
    def enabled(self) -> bool:
        """Whether a notify socket is configured."""
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send `WATCHDOG=1` (half of `WATCHDOG_USEC`), or None when not asked."""
        if self._watchdog_usec is None:
            return None
        return self._watchdog_usec / 2_000_000

    def ready(self, status: str | None = None) -> None:
        """`READY=1`: startup checks passed and the first tick succeeded."""
        self._send("READY=1", status)

    def watchdog(self) -> None:
        """`WATCHDOG=1`: the loop is alive; ignored unless the watchdog is meant for us."""
        if self._watchdog_usec is not None:
            self._send("WATCHDOG=1", None)

    def status(self, text: str) -> None:
        """`STATUS=…`: a one-line summary shown by `systemctl status`."""
        self._send(None, text)

    def stopping(self, status: str | None = None) -> None:
        """`STOPPING=1`: shutdown began."""
        self._send("STOPPING=1", status)

    def extend_timeout(self, seconds: float) -> None:
        """`EXTEND_TIMEOUT_USEC=…`: the current start or stop phase needs `seconds` more."""
        self._send(f"EXTEND_TIMEOUT_USEC={max(int(seconds * 1_000_000), 0)}", None)

    def close(self) -> None:
        """Close the socket (a later send opens a new one)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _send(self, field: str | None, status: str | None) -> None:
        if self._address is None:
            return
        lines = [] if field is None else [field]
        if status is not None:
            lines.append("STATUS=" + _one_line(status))
        payload = "\n".join(lines).encode()
        try:
            if self._socket is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.setblocking(False)
                self._socket = sock
            self._socket.sendto(payload, self._address)
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "systemd.notify_failed",
                    notice=lines[0].split("=", 1)[0],
                    error=exc.strerror or repr(exc),
                )
            self._failing = True
            self.close()
            return
        self._failing = False
