"""The event stream's source: new approval requests and settled dispatches, read from the
database while anyone listens.

Each list is followed by time with an overlap (`activity.Window`), so a row that commits a
little after a later one (another replica, a slow transaction) is still announced, once. The
stream is a notification, not the record: a client that must see everything reads
`GET /dispatches` or `GET /approvals` after it (re)connects.
"""

from __future__ import annotations

import dataclasses
from typing import Final

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import activity, errors
from qinglong_dispatcher.web import events

log = structlog.get_logger("qinglong_dispatcher.api")

OVERLAP_MS: Final = 10_000
"""How far back each read looks again for rows that committed late."""
READ_LIMIT: Final = 500
"""Rows of each kind per read; a longer burst is read on at once, without the wait."""


class Feed:
    """Reads recent activity into the hub every `hub.poll_s` while the hub has subscribers."""

    def __init__(self, store: ports.DispatchReadStore, clock: ports.Clock, hub: events.Hub) -> None:
        self._store = store
        self._clock = clock
        self._hub = hub
        self._requested: activity.Window | None = None
        self._settled: activity.Window | None = None

    async def run(self) -> None:
        """Until the hub closes (or the task is cancelled)."""
        while not self._hub.closed:
            if not await self.read_once():
                await anyio.sleep(self._hub.poll_s)

    async def read_once(self) -> bool:
        """One read; True when a list hit its limit (read on without waiting)."""
        if self._hub.subscribers == 0:
            # Nobody listens: the next subscriber starts from then, not from a backlog.
            self._requested = self._settled = None
            return False
        if self._requested is None or self._settled is None:
            now_ms = self._clock.now_ms()
            self._requested = activity.Window(start_ms=now_ms, overlap_ms=OVERLAP_MS)
            self._settled = activity.Window(start_ms=now_ms, overlap_ms=OVERLAP_MS)
        try:
            found = await self._store.recent_activity(
                requested_since_ms=self._requested.since_ms,
                settled_since_ms=self._settled.since_ms,
                limit=READ_LIMIT,
            )
        except errors.StoreError as exc:
            log.warning("api.events_read_failed", code=exc.code)
            return False
        self._publish(found)
        return max(len(found.requested), len(found.settled)) >= found.limit

    def _publish(self, found: activity.Activity) -> None:
        assert self._requested is not None
        assert self._settled is not None
        requested = {r.approval_request_id: r for r in found.requested}
        fresh = self._requested.fresh(
            [(r.approval_request_id, r.created_at_ms) for r in found.requested],
            full=len(found.requested) >= found.limit,
        )
        for key in fresh:
            self._hub.publish(activity.APPROVAL_REQUESTED, dataclasses.asdict(requested[key]))
        settled = {s.dispatch_id: s for s in found.settled}
        fresh = self._settled.fresh(
            [(s.dispatch_id, s.settled_at_ms) for s in found.settled],
            full=len(found.settled) >= found.limit,
        )
        for key in fresh:
            self._hub.publish(activity.DISPATCH_SETTLED, dataclasses.asdict(settled[key]))
