"""Overlapping pages: the executes in flight across pages, at most `concurrency` at once.

A page of `Dispatcher.dispatch_batch` waits for its slowest item, so one slow execute (an
`http.request` to a slow receiver) holds back the next claim while the other workers idle.
Inside `Dispatcher.overlapping` (the daemon, the bench's replicas) each claimed item runs in a
slot of one long-lived task group instead: a batch returns once its claims are handed to
slots, and the next claims once at least half the slots are free. A claim asks for no more
rows than there are free slots, so no claimed row waits for a worker: its lease needs no
renewal before its start and no other replica waits for a row that sits in a queue. Waiting
for half the slots keeps the items that start together, whose start barriers (and then
completions) commit in one transaction, as many as half the workers (decision 0056).
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import structlog

from qinglong_dispatcher.domain import errors

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")


class Finished:
    """Item outcomes of slots, counted when each item ends and handed to the next report."""

    def __init__(self) -> None:
        self.by_action: dict[str, collections.Counter[str]] = {}

    def count(self, action_type: str, outcome: str) -> None:
        """Add one item outcome."""
        self.by_action.setdefault(action_type, collections.Counter())[outcome] += 1

    def take(self) -> dict[str, collections.Counter[str]]:
        """The outcomes counted since the last `take` (each one is handed out once)."""
        taken, self.by_action = self.by_action, {}
        return taken


class Slots:
    """At most `concurrency` items in flight, each in its own task of `group`."""

    def __init__(self, group: anyio.abc.TaskGroup, concurrency: int) -> None:
        self._group = group
        self._limit = concurrency
        self._busy = 0
        self._enough = (concurrency + 1) // 2
        self._changed = anyio.Event()
        self.finished = Finished()
        self.peak = 0
        """The most items ever in flight at once (tests check it never passes the limit)."""
        self.failure: errors.StoreError | None = None
        """A store fault that escaped an item, for the next batch to raise."""

    def take_failure(self) -> errors.StoreError | None:
        """The store fault an item met since the last call, if any (handed out once)."""
        failure, self.failure = self.failure, None
        return failure

    @property
    def free(self) -> int:
        """Slots no item holds now."""
        return self._limit - self._busy

    @property
    def busy(self) -> int:
        """Items in flight now."""
        return self._busy

    async def wait_free(self, draining: Callable[[], bool]) -> None:
        """Until at least half the slots are free (one of two, two of three, four of eight) or
        the dispatcher drains (`wake` says so)."""
        while self.free < self._enough and not draining():
            await self._changed.wait()

    def wake(self) -> None:
        """Something a waiter checks changed (an item ended, the dispatcher drains)."""
        self._changed.set()
        self._changed = anyio.Event()

    async def idle(self) -> None:
        """Until no item is in flight."""
        while self._busy:
            await self._changed.wait()

    def start(self, item: Callable[[], Awaitable[None]], *, dispatch_id: str) -> None:
        """Run `item` in a slot; the caller has checked that one is free."""
        assert self._busy < self._limit, "a claim asked for more rows than free slots"
        self._busy += 1
        self.peak = max(self.peak, self._busy)
        self._group.start_soon(self._run, item, dispatch_id)

    async def _run(self, item: Callable[[], Awaitable[None]], dispatch_id: str) -> None:
        try:
            await item()
        except errors.StoreError as exc:
            # The item path answers its own store faults; one that escapes it must not stop
            # the other slots: the lease expires and another claim takes the row over. The
            # next batch raises it, so the tick handles it as it handled a page's (a full
            # disk makes the daemon unwritable, an unreachable store unhealthy).
            log.warning("dispatch.item_failed", dispatch_id=dispatch_id, code=exc.code)
            if self.failure is None:
                self.failure = exc
        finally:
            self._busy -= 1
            self.wake()
