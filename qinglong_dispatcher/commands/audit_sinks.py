"""Where `audit export` writes: standard output (JSON lines or CEF), or a syslog socket.

A syslog sink (`--syslog udp://host:514` or `unix:///dev/log`) sends each record as one RFC
5424 message in one datagram (RFC 5426 over UDP; a local datagram socket as `/dev/log` is).
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from collections.abc import Mapping
from typing import Protocol

from qinglong_dispatcher import __version__
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.domain import audit_formats

SEND_TIMEOUT_S = 5.0
"""How long one datagram may wait for room in a full local socket before the export stops."""


class SyslogUnavailable(Exception):
    """The syslog receiver could not be sent a record (exit 69, as an unreachable store)."""


class Sink(Protocol):
    """One destination for exported records."""

    def send(self, record: Mapping[str, object]) -> None:
        """Write one record (schema v1's dict)."""

    def flush(self) -> None:
        """Make every record sent so far leave the process."""

    def close(self) -> None:
        """Release what the sink holds."""


class Lines:
    """Standard output, one record a line: a JSON object or a CEF line."""

    def __init__(self, form: audit_formats.Format) -> None:
        self._form = form

    def send(self, record: Mapping[str, object]) -> None:
        if self._form is audit_formats.Format.CEF:
            line = audit_formats.cef_line(record, version=__version__)
        else:
            line = audit_formats.json_line(record)
        sys.stdout.write(line + "\n")

    def flush(self) -> None:
        sys.stdout.flush()

    def close(self) -> None:
        self.flush()


class Syslog:
    """RFC 5424 messages to a UDP receiver or a local datagram socket."""

    def __init__(self, url: str) -> None:
        family, address = parse_syslog_url(url)
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        self._sock.settimeout(SEND_TIMEOUT_S)
        self._address = address
        self._hostname = socket.gethostname()
        self._procid = str(os.getpid())

    def send(self, record: Mapping[str, object]) -> None:
        message = audit_formats.syslog_message(record, hostname=self._hostname, procid=self._procid)
        try:
            self._sock.sendto(message, self._address)
        except OSError as exc:
            raise SyslogUnavailable(
                f"syslog: cannot send to the receiver ({exc.__class__.__name__})"
            ) from None

    def flush(self) -> None:
        """Datagrams leave as they are sent."""

    def close(self) -> None:
        self._sock.close()


def parse_syslog_url(url: str) -> tuple[socket.AddressFamily, str | tuple[str, int]]:
    """`udp://host[:port]` (port 514 by default) or `unix:///path`; `UsageError` else."""
    parts = urllib.parse.urlsplit(url)
    try:
        if parts.scheme == "udp" and parts.hostname and not parts.path.strip("/"):
            info = socket.getaddrinfo(parts.hostname, parts.port or 514, type=socket.SOCK_DGRAM)
            family, _type, _proto, _name, address = info[0]
            return family, (str(address[0]), int(address[1]))
        if parts.scheme == "unix" and not parts.netloc and parts.path.startswith("/"):
            return socket.AF_UNIX, parts.path
    except (OSError, ValueError):
        pass
    raise common.UsageError("--syslog: must be udp://host[:port] or unix:///path/to/socket")
