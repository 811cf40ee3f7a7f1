"""One signed webhook POST, and the HTTP client the deliverer and `notify test` send with.

The only module of the notifier that imports aiohttp: the deliverer imports it on its first
post, so a daemon that has nothing to deliver never loads the client.
"""

from __future__ import annotations

import dataclasses
import time

import aiohttp

from qinglong_dispatcher.domain import notifications as n


def client(timeout_s: float) -> aiohttp.ClientSession:
    """The client every post of one deliverer shares (an answer's status is all it reads)."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s), raise_for_status=False
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """What one post came back with (`code` None: no answer)."""

    code: int | None
    error_code: str | None
    latency_ms: int


async def send(
    session: aiohttp.ClientSession,
    url: str,
    key: bytes,
    event: n.Event,
    fmt: n.Format,
    *,
    timestamp_s: int,
    ui_base: str | None = None,
    started: float | None = None,
) -> Sent:
    """One signed POST of `event` to `url` (also `notify test`'s sample)."""
    started = time.monotonic() if started is None else started
    data = n.body(event, fmt, ui_base)
    headers = n.signed_headers(key, event.message_id, timestamp_s, data)
    try:
        # The answer's body is never read: only its status counts.
        async with session.post(url, data=data, headers=headers, allow_redirects=False) as got:
            code: int | None = got.status
            error = None if 200 <= got.status < 300 else "http_status"
    except TimeoutError:
        code, error = None, "timeout"
    except aiohttp.ClientError:
        code, error = None, "connect_failed"
    return Sent(code, error, max(0, int((time.monotonic() - started) * 1000)))
