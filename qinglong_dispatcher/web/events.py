"""`GET /api/v1/events`: Server-Sent Events of new approval requests and settled dispatches.

The feed (`feed.Feed`) reads them from the database while anyone listens, so the stream shows
what every replica and every CLI did, and publishes them into the hub; every subscriber has a
bounded queue, and one that falls behind is disconnected (it reconnects with `Last-Event-ID`
and gets what the replay buffer still holds). The number of subscribers is bounded; one more
is refused 503 `too_many_streams`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
from collections.abc import Iterator
from typing import Final

import structlog
from aiohttp import web

log = structlog.get_logger("qinglong_dispatcher.api")

QUEUE_SIZE: Final = 1024
"""Events a subscriber may have waiting; beyond that it is disconnected."""
REPLAY: Final = 1024
"""Events kept for a reconnecting subscriber's `Last-Event-ID`."""
HEARTBEAT_S: Final = 15.0
POLL_S: Final = 1.0
"""How often the feed reads new activity while anyone listens."""
RETRY_MS: Final = 3000
"""The reconnection delay the stream asks clients for."""


class TooManyStreams(Exception):
    """Every subscriber slot is taken."""


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One event: its sequence number (the SSE id), name and JSON data."""

    seq: int
    name: str
    data: dict[str, object]

    def encode(self) -> bytes:
        """The event as SSE lines."""
        payload = json.dumps(self.data, separators=(",", ":"), sort_keys=True)
        return f"id: {self.seq}\nevent: {self.name}\ndata: {payload}\n\n".encode()


_CLOSE: Final = Event(seq=-1, name="", data={})


class Hub:
    """Fans events out to bounded subscriber queues; lives on the daemon's event loop."""

    def __init__(
        self, *, max_subscribers: int, heartbeat_s: float = HEARTBEAT_S, poll_s: float = POLL_S
    ) -> None:
        self.max_subscribers = max_subscribers
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self._queues: set[asyncio.Queue[Event]] = set()
        self._recent: collections.deque[Event] = collections.deque(maxlen=REPLAY)
        self._seq = 0
        self.closed = False

    @property
    def subscribers(self) -> int:
        """Streams open now."""
        return len(self._queues)

    def publish(self, name: str, data: dict[str, object]) -> None:
        """Announce one event to every subscriber."""
        self._seq += 1
        event = Event(self._seq, name, data)
        self._recent.append(event)
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # Too slow: it ends and reconnects with Last-Event-ID.
                self._queues.discard(queue)
                self._end(queue)

    @staticmethod
    def _end(queue: asyncio.Queue[Event]) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            while queue.full():
                queue.get_nowait()
            queue.put_nowait(_CLOSE)

    def close(self) -> None:
        """End every stream (shutdown)."""
        self.closed = True
        for queue in list(self._queues):
            self._end(queue)
        self._queues.clear()

    @contextlib.contextmanager
    def subscribe(self, last_event_id: int | None = None) -> Iterator[asyncio.Queue[Event]]:
        """A queue of events from now on (after `last_event_id`'s still buffered ones)."""
        if self.closed or len(self._queues) >= self.max_subscribers:
            raise TooManyStreams
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=QUEUE_SIZE)
        if last_event_id is not None:
            for event in self._recent:
                if event.seq > last_event_id and not queue.full():
                    queue.put_nowait(event)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)


def _last_event_id(request: web.Request) -> int | None:
    text = request.headers.get("Last-Event-ID", "")
    return int(text) if text.isdigit() and len(text) < 19 else None


async def stream(request: web.Request, hub: Hub, write_timeout_s: float) -> web.StreamResponse:
    """Serve one subscriber until the hub closes, the client leaves or stops reading."""
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    with hub.subscribe(_last_event_id(request)) as queue:
        await response.prepare(request)
        await response.write(f"retry: {RETRY_MS}\n: connected\n\n".encode())
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), hub.heartbeat_s)
            except TimeoutError:
                chunk = b": heartbeat\n\n"
            else:
                if event is _CLOSE:
                    break
                chunk = event.encode()
            try:
                # A client that stops reading blocks this write: it loses its stream.
                await asyncio.wait_for(response.write(chunk), write_timeout_s)
            except (TimeoutError, ConnectionError):
                log.info("api.stream_dropped")
                break
    return response
