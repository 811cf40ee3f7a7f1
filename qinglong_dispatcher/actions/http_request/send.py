"""The aiohttp client of `http.request`: one session per receiver, one send per call, classified.

The only module of the action that imports aiohttp (edge devices pay for every import, and a
daemon without receivers never loads it). Each send is exactly one request:

- no redirect is followed (`allow_redirects=False`) and no proxy is used (`trust_env=False`),
  so the origin can never change; a 3xx is `UNCERTAIN` (`http_redirect`);
- aiohttp's own resend of an idempotent method on a dropped connection is refused by a
  per-request middleware: after the barrier a resend is the handler's decision, never the
  library's;
- the address every socket connects to must be one the receiver's host resolved to (checked
  by the socket factory, before a byte is written): a connection elsewhere is `NOT_SENT`;
- a plain-HTTP receiver named by a host name is resolved once per process and pinned: a
  name re-pointed in DNS later never moves its sends (an https receiver follows DNS, since
  TLS proves the name on each connection);
- whether a byte may have been written is decided by whether a connection was established
  (aiohttp's connection trace): before that every failure is `NOT_SENT`, after it `UNCERTAIN`;
- the body is read in chunks up to `max_response_bytes` and only its SHA-256 and size are
  kept (an evidence lookup keeps the bounded bytes in memory to read the key's state).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Final

import aiohttp
import aiohttp.abc
import yarl
from aiohappyeyeballs import AddrInfoType

from qinglong_dispatcher.actions.http_request import receivers
from qinglong_dispatcher.actions.http_request import request as http

Kind = http.OutcomeKind
CHUNK_BYTES: Final = 64 * 1024
MAX_KEPT_VALUE_CHARS: Final = 512
USER_AGENT: Final = "qinglong-dispatcher (http.request)"


@dataclasses.dataclass
class _Attempt:
    """What one send learned about its connection."""

    connected: bool = False
    handled: int = 0
    peer_refused: bool = False


_ATTEMPT: contextvars.ContextVar[_Attempt] = contextvars.ContextVar("http_request_attempt")


class _ResendRefused(Exception):
    """aiohttp tried to send the same request a second time."""


class _PeerRefused(OSError):
    """A socket was about to connect to an address the receiver's host did not resolve to."""


Resolve = Callable[[str, int, socket.AddressFamily], Awaitable[list[aiohttp.abc.ResolveResult]]]
"""A name lookup (`aiohttp.abc.AbstractResolver.resolve`); the system's threaded one unless a
`Sender` is given another."""

Pins = dict[str, list[aiohttp.abc.ResolveResult]]
"""The first answer for each host name of one plain-HTTP receiver, kept for the process."""


class _RecordingResolver(aiohttp.abc.AbstractResolver):
    """One session's resolver, remembering every address it answered per host. With `pins`
    (a plain-HTTP receiver named by a host name) the first answer is the only one: the name
    is never looked up again, so re-pointing it in DNS cannot move the clear-text sends."""

    def __init__(self, resolve: Resolve | None, pins: Pins | None) -> None:
        self._threaded: aiohttp.ThreadedResolver | None = None
        if resolve is None:
            self._threaded = aiohttp.ThreadedResolver()
            resolve = self._threaded.resolve
        self._resolve = resolve
        self._pins = pins
        self.seen: dict[str, set[str]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        results = None if self._pins is None else self._pins.get(host)
        if results is None:
            results = await self._resolve(host, port, family)
            if self._pins is not None:
                self._pins[host] = list(results)
        self.seen.setdefault(host, set()).update(_normal(r["host"]) for r in results)
        return results

    async def close(self) -> None:
        if self._threaded is not None:
            await self._threaded.close()


PROCESS_PINS: Final[dict[tuple[str, str], Pins]] = {}
"""The pins of every plain-HTTP receiver of this process, by (name, base URL): each sender
shares them, so the executes' sends and recovery's lookups of one receiver reach one address."""


def _pinned(receiver: receivers.Receiver) -> bool:
    """Whether the receiver's name is resolved once per process: plain HTTP (nothing proves
    the peer is the name's) to a host name (a literal address needs no lookup)."""
    if not receiver.base_url.startswith("http://"):
        return False  # TLS verifies the name on every connection, wherever DNS points
    try:
        ipaddress.ip_address(receiver.host.partition("%")[0])
    except ValueError:
        return True
    return False


def _normal(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address.partition("%")[0]))
    except ValueError:
        return address


async def _once(
    req: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    # aiohttp resends PUT and DELETE once on a dropped connection; after the barrier that
    # would be a silent second delivery.
    attempt = _ATTEMPT.get()
    attempt.handled += 1
    if attempt.handled > 1:
        raise _ResendRefused
    return await handler(req)


async def _on_connected(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: object
) -> None:
    _ATTEMPT.get().connected = True


class Sender:
    """Implements `request.Sender` over one lazily created session per receiver."""

    def __init__(
        self,
        *,
        resolve: Resolve | None = None,
        pins: dict[tuple[str, str], Pins] | None = None,
    ) -> None:
        self._sessions: dict[str, tuple[aiohttp.ClientSession, _RecordingResolver]] = {}
        self._resolve = resolve
        # What each plain-HTTP receiver's name resolved to first: the process's (`PROCESS_PINS`)
        # unless given others, and kept when a session is closed and made again.
        self._pins = PROCESS_PINS if pins is None else pins

    def _session(self, receiver: receivers.Receiver) -> aiohttp.ClientSession:
        # Created inside the running loop, at the first send: building the sender does no I/O.
        found = self._sessions.get(receiver.name)
        if found is not None:
            return found[0]
        pinned = _pinned(receiver)
        pins = self._pins.setdefault((receiver.name, receiver.base_url), {}) if pinned else None
        resolver = _RecordingResolver(self._resolve, pins)
        literal = _normal(receiver.host)

        def socket_for(addr_info: AddrInfoType) -> socket.socket:
            family, kind, proto, _, address = addr_info
            allowed = resolver.seen.get(receiver.host, set()) | {literal}
            if _normal(str(address[0])) not in allowed:
                _ATTEMPT.get().peer_refused = True
                raise _PeerRefused("peer is not the receiver's resolved address")
            return socket.socket(family, kind, proto)

        ssl_context: ssl.SSLContext | bool = True
        if receiver.ca_pem is not None:
            ssl_context = ssl.create_default_context(cadata=receiver.ca_pem)
        connector = aiohttp.TCPConnector(
            limit=receiver.concurrency,
            limit_per_host=receiver.concurrency,
            ssl=ssl_context,
            resolver=resolver,
            # A pinned name is its own cache; any other follows DNS within aiohttp's TTL.
            use_dns_cache=not pinned,
            socket_factory=socket_for,
        )
        trace = aiohttp.TraceConfig()
        trace.on_connection_create_end.append(_on_connected)
        trace.on_connection_reuseconn.append(_on_connected)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=receiver.total_timeout_s,
                sock_connect=receiver.connect_timeout_s,
                sock_read=receiver.read_timeout_s,
            ),
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            trace_configs=[trace],
            headers={"User-Agent": USER_AGENT},
            # The body's type is the plan's alone, and no compression is asked for: the body
            # digest is over the bytes as the receiver sent them.
            skip_auto_headers=("Accept-Encoding", "Content-Type"),
            middlewares=(_once,),
        )
        self._sessions[receiver.name] = (session, resolver)
        return session

    async def send(
        self,
        receiver: receivers.Receiver,
        prepared: http.PreparedRequest,
        *,
        keep_body: bool = False,
    ) -> http.Outcome:
        """Send `prepared` once and classify the answer (see the module docstring)."""
        session = self._session(receiver)
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            async with session.request(
                prepared.method,
                yarl.URL(prepared.url, encoded=True),
                headers=list(prepared.headers),
                data=prepared.body,
                allow_redirects=False,
            ) as response:
                return await _classify(receiver, response, keep_body=keep_body)
        except Exception as exc:
            return _failure(exc, attempt)
        finally:
            _ATTEMPT.reset(token)

    async def aclose(self) -> None:
        """Close every session (and its connections); the sender can be used again after."""
        sessions, self._sessions = self._sessions, {}
        for session, _ in sessions.values():
            await session.close()


async def _classify(
    receiver: receivers.Receiver, response: aiohttp.ClientResponse, *, keep_body: bool
) -> http.Outcome:
    status = response.status
    if 300 <= status < 400:
        return http.Outcome(kind=Kind.UNCERTAIN, code="http_redirect", status=status)
    if status == 409:
        return http.Outcome(
            kind=Kind.IN_FLIGHT,
            code="http_409",
            status=status,
            retry_after_s=_retry_after(response),
        )
    if 200 <= status < 300:
        kind = Kind.ACCEPTED
    elif status in receiver.failed_statuses:
        kind = Kind.REFUSED
    else:
        return http.Outcome(kind=Kind.UNCERTAIN, code=f"http_{status}", status=status)
    digest = hashlib.sha256()
    size = 0
    kept = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        size += len(chunk)
        if size > receiver.max_response_bytes:
            return http.Outcome(kind=Kind.UNCERTAIN, code="response_too_large", status=status)
        digest.update(chunk)
        if keep_body:
            kept.extend(chunk)
    return http.Outcome(
        kind=kind,
        code=f"http_{status}",
        status=status,
        headers={name: _kept(response, name) for name in receiver.keep_headers},
        body_digest=digest.hexdigest(),
        body_bytes=size,
        replayed=response.headers.get("Idempotency-Replayed", "").strip().lower() == "true",
        body=bytes(kept) if keep_body else None,
    )


def _kept(response: aiohttp.ClientResponse, name: str) -> str | None:
    """A kept header's value, or None when absent or not short printable ASCII."""
    values = response.headers.getall(name, [])
    if not values:
        return None
    value = ", ".join(values)
    if len(value) > MAX_KEPT_VALUE_CHARS or not value.isascii() or not value.isprintable():
        return None
    return value


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() and len(value) <= 6 else None


def _failure(exc: Exception, attempt: _Attempt) -> http.Outcome:
    """An exception of one send, classified; its text is never kept (it may hold the URL)."""
    if attempt.peer_refused:
        return http.Outcome(kind=Kind.NOT_SENT, code="peer_mismatch")
    if not attempt.connected:
        # No connection was ever established: not a byte of the request left this process.
        if isinstance(exc, aiohttp.ClientConnectorDNSError):
            code = "dns_failed"
        elif isinstance(exc, aiohttp.ClientConnectorCertificateError):
            code = "tls_certificate"
        elif isinstance(exc, aiohttp.ClientSSLError):
            code = "tls_failed"
        elif isinstance(exc, TimeoutError):
            code = "connect_timeout"
        else:
            code = "connect_failed"
        return http.Outcome(kind=Kind.NOT_SENT, code=code)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        code = "connect_timeout"
    elif isinstance(exc, aiohttp.SocketTimeoutError):
        code = "read_timeout"
    elif isinstance(exc, TimeoutError):
        code = "total_timeout"
    elif isinstance(exc, aiohttp.ClientPayloadError):
        code = "body_truncated"
    elif isinstance(exc, aiohttp.ClientResponseError):
        code = "bad_response"
    elif isinstance(exc, _ResendRefused | aiohttp.ServerDisconnectedError | OSError):
        code = "connection_reset"
    else:
        code = "client_error"
    return http.Outcome(kind=Kind.UNCERTAIN, code=code)
