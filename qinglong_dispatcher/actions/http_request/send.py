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


class _RecordingResolver(aiohttp.abc.AbstractResolver):
    """The threaded resolver, remembering every address it answered per host."""

    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()
        self.seen: dict[str, set[str]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        self.seen.setdefault(host, set()).update(_normal(r["host"]) for r in results)
        return results

    async def close(self) -> None:
        await self._inner.close()


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

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[aiohttp.ClientSession, _RecordingResolver]] = {}

    def _session(self, receiver: receivers.Receiver) -> aiohttp.ClientSession:
        # Created inside the running loop, at the first send: building the sender does no I/O.
        found = self._sessions.get(receiver.name)
        if found is not None:
            return found[0]
        resolver = _RecordingResolver()
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
