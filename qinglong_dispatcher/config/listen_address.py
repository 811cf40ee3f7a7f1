"""`QINGLONG_API_LISTEN`: a `host:port`, `[v6]:port` or `unix:/path`, parsed without I/O."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Protocol

from pydantic import AfterValidator

_HOST_PORT = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+)):(?P<port>\d{1,5})"
)

UNIX_PREFIX = "unix:"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListenAddress:
    """Where the API listens: a TCP host and port, or a unix socket path (then host is None)."""

    host: str | None = None
    port: int = 0
    path: Path | None = None

    @property
    def is_unix(self) -> bool:
        """A local socket: file permissions guard it, TLS is not required."""
        return self.path is not None

    @property
    def is_loopback(self) -> bool:
        """`localhost` or a loopback literal (127.0.0.0/8, ::1): TLS is not required.

        Another name is not resolved here: whatever it resolves to, TLS is required for it.
        """
        if self.host is None:
            return False
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        if self.path is not None:
            return f"{UNIX_PREFIX}{self.path}"
        host = f"[{self.host}]" if self.host is not None and ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse(text: str) -> ListenAddress:
    """The address `text` names; ValueError (its message a reason for the setting) otherwise."""
    if text.startswith(UNIX_PREFIX):
        path = Path(text.removeprefix(UNIX_PREFIX))
        if not path.is_absolute() or len(str(path).encode()) > 100:
            raise ValueError(
                f"a unix socket needs an absolute path of at most 100 bytes (got {text!r})"
            )
        return ListenAddress(path=path)
    found = _HOST_PORT.fullmatch(text)
    if found is None:
        raise ValueError(f"must be host:port, [v6-address]:port or unix:/path (got {text!r})")
    port = int(found.group("port"))
    if port > 65535:
        raise ValueError(f"the port must be between 0 and 65535 (got {text!r})")
    v6 = found.group("v6")
    if v6 is not None:
        try:
            ipaddress.IPv6Address(v6)
        except ValueError:
            raise ValueError(f"not an IPv6 address in brackets (got {text!r})") from None
        return ListenAddress(host=v6, port=port)
    return ListenAddress(host=found.group("host"), port=port)


class TlsSettings(Protocol):
    """The settings `tls_refusal` reads."""

    @property
    def api_address(self) -> ListenAddress | None: ...
    @property
    def api_tls_cert_file(self) -> Path | None: ...
    @property
    def api_tls_key_file(self) -> Path | None: ...
    @property
    def api_client_ca_file(self) -> Path | None: ...


def tls_refusal(settings: TlsSettings, name: Callable[[str], str]) -> str:
    """Why the API's TLS settings are refused ("" when they are fine): TLS off loopback, a
    certificate and its key together, client certificates only over TLS; `name` names a
    setting as the user sets it."""
    address, cert = settings.api_address, settings.api_tls_cert_file
    key, client_ca = settings.api_tls_key_file, settings.api_client_ca_file
    if (cert is None) != (key is None):
        return f"{name('api_tls_cert_file')} and {name('api_tls_key_file')}: set both or neither"
    if client_ca is not None and cert is None:
        return (
            f"{name('api_client_ca_file')}: client certificates need TLS (set "
            f"{name('api_tls_cert_file')} and {name('api_tls_key_file')})"
        )
    if address is None:
        if cert is not None:
            return f"{name('api_tls_cert_file')}: applies only with {name('api_listen')}"
        return ""
    if cert is None and not (address.is_loopback or address.is_unix):
        return (
            f"{name('api_listen')}: TLS is required off loopback (got {address}): set "
            f"{name('api_tls_cert_file')} and {name('api_tls_key_file')}, or listen on "
            "127.0.0.1 or a unix: socket"
        )
    if cert is not None and address.is_unix:
        return (
            f"{name('api_tls_cert_file')}: not with a unix: socket (its file permissions are "
            "the guard)"
        )
    return ""


def _checked(text: str | None) -> str | None:
    if text is not None:
        parse(text)
    return text


Setting = Annotated[str | None, AfterValidator(_checked)]
"""The type of the `api_listen` setting: unset, or text `parse` accepts."""
