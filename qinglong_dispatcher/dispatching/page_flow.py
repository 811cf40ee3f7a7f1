"""Pages that overlap: the next page is claimed once every item of the page before has a
worker (or went through its page transaction), not once its slowest item is done.

`concurrency` workers carry the claimed items of every page of one call, one item at a time
each, so at most `concurrency` items are between their inspect and their completion at once,
whatever the pages. The next page is claimed when the queue is empty and a worker is idle: a
page's items never wait behind more than one page, and a slow item (an HTTP request, a
command) holds one worker, not the pages after it. With one worker, a page's last item still
holds the next claim, as before.

What a page's items need from the pages around them is kept:

- **Leases.** Claims waiting in the queue, of any page, are renewed at a third of the lease
  (an executing item renews its own).
- **Barrier groups.** Idle workers about to take a new page's items are announced to the
  start barriers first, so their barriers commit in one transaction, as a page's first
  items did; an announcement no item will use is withdrawn at once (`ItemRunner.announce`).
- **Shutdown.** On `drain`, nothing more is claimed, the claims still queued go back at once,
  and the call returns when the items being executed are done (the daemon's grace bounds
  that wait).

A claim that fails (the store's error) claims no more pages: the items already taken are
carried to their end, then the error propagates, as it did before any item ran.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import claimed_item
from qinglong_dispatcher.domain import errors, records
from qinglong_dispatcher.domain.records import Outcome

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")


class PageReport(Protocol):
    """What the flow needs of a page's report (`dispatcher.BatchReport`)."""

    @property
    def full_page(self) -> bool:
        """Whether the page's observation filled it (more may be due)."""
        ...

    def count(self, action_type: str, outcome: str) -> None:
        """Add one item outcome."""
        ...


R = TypeVar("R", bound=PageReport)


@dataclasses.dataclass(eq=False, kw_only=True, slots=True)
class ClaimedPage(Generic[R]):
    """A claimed page: its report, and the claims left for the workers (its page transaction,
    if any, has committed the rest)."""

    report: R
    claims: Sequence[records.Claim]
    started: float
    """`time.monotonic()` when its claim began."""


@dataclasses.dataclass(eq=False, kw_only=True, slots=True)
class _Page(Generic[R]):
    claimed: ClaimedPage[R]
    open: int
    """Its items not yet carried to an outcome."""


class PageFlow(Generic[R]):
    """One call's pages: claimed while the workers carry the items of the pages before."""

    def __init__(
        self,
        store: ports.ExecutionStore,
        items: claimed_item.ItemRunner,
        clock: ports.Clock,
        *,
        concurrency: int,
        lease_ms: int,
        draining: anyio.Event,
    ) -> None:
        self._store = store
        self._items = items
        self._clock = clock
        self._concurrency = concurrency
        self._lease_ms = lease_ms
        self._draining = draining
        self._queue: collections.deque[tuple[records.Claim, _Page[R]]] = collections.deque()
        # Taking an item from the queue and renewing the queued ones exclude each other, so a
        # worker never starts with a version the renewal has just made stale.
        self._lock = anyio.Lock()
        self._idle = concurrency
        self._announced = 0
        """Announcements made for idle workers and not yet used by a taken item."""
        self._claiming = True
        self._changed = anyio.Event()
        self._observer: Callable[[R, float], None] | None = None

    def _poke(self) -> None:
        """Wake whoever waits for the queue, the workers or the claims to change."""
        self._changed.set()
        self._changed = anyio.Event()

    async def run(
        self,
        claim_page: Callable[[], Awaitable[ClaimedPage[R]]],
        *,
        max_pages: int,
        stopping: Callable[[], bool],
        on_page: Callable[[R, float], None] | None,
    ) -> list[R]:
        """Claim up to `max_pages` pages while each comes back full and nothing says stop;
        return their reports in claim order once every claimed item has its outcome
        (`on_page` hears of each page, with its duration from claim to last outcome, as it
        ends)."""
        self._observer = on_page
        reports: list[R] = []
        failure: Exception | None = None
        waiting = anyio.CancelScope()
        keeping = anyio.CancelScope()

        async def claim_pages() -> None:
            nonlocal failure
            try:
                for _ in range(max_pages):
                    if self._draining.is_set():
                        return
                    claimed = await claim_page()
                    reports.append(claimed.report)
                    await self._enqueue(claimed)
                    if not claimed.report.full_page or stopping():
                        return
                    await self._until_a_worker_is_free()
            except Exception as exc:  # carried items go on; the error is raised after them
                failure = exc
            finally:
                self._claiming = False
                self._poke()

        async def give_back_on_drain() -> None:
            with waiting:
                await self._draining.wait()
            if not waiting.cancel_called:
                self._poke()  # a claim that waits for a free worker claims no more
                await self._give_back_queued()

        async def keep_queued_leases() -> None:
            with keeping:
                while True:
                    await anyio.sleep(self._lease_ms / 3000)
                    async with self._lock:
                        await self._renew_queued()

        async with anyio.create_task_group() as tg:
            tg.start_soon(give_back_on_drain)
            tg.start_soon(keep_queued_leases)
            async with anyio.create_task_group() as workers:
                workers.start_soon(claim_pages)
                for _ in range(self._concurrency):
                    workers.start_soon(self._work)
            waiting.cancel()
            keeping.cancel()
        if failure is not None:
            raise failure
        return reports

    async def _enqueue(self, claimed: ClaimedPage[R]) -> None:
        page = _Page(claimed=claimed, open=len(claimed.claims))
        if not claimed.claims:
            self._observe(page)
            return
        async with self._lock:
            self._queue.extend((claim, page) for claim in claimed.claims)
            # The idle workers' next items reach their start barriers together: announced
            # before any of them runs, so their barriers commit in one transaction.
            wanted = min(self._idle, len(self._queue))
            if wanted > self._announced:
                self._items.announce(wanted - self._announced)
                self._announced = wanted
        self._poke()

    async def _until_a_worker_is_free(self) -> None:
        """Until the queue is empty and a worker idle, or the flow drains."""
        while not self._draining.is_set() and (self._queue or self._idle == 0):
            await self._changed.wait()

    async def _work(self) -> None:
        while True:
            async with self._lock:
                entry = self._queue.popleft() if self._queue else None
                first = False
                if entry is not None:
                    self._idle -= 1
                    if self._announced:
                        self._announced -= 1
                        first = True
            if entry is None:
                if not self._claiming:
                    return
                await self._changed.wait()
                continue
            claim, page = entry
            self._poke()  # the queue shrank: the next page may be claimed
            try:
                await self._carry(claim, page, announced=first)
            finally:
                self._idle += 1
                self._poke()

    async def _carry(self, claim: records.Claim, page: _Page[R], *, announced: bool) -> None:
        assert claim.lease is not None
        assert claim.dispatch is not None
        if self._draining.is_set():
            if announced:
                self._items.withdraw()
            outcome = await self._items.give_back(claim.lease, claim.dispatch)
        else:
            outcome = await self._items.process(
                claim.lease,
                claim.dispatch,
                announced=announced,
                taken_over=claim.taken_over is not None,
            )
        self._done(claim, page, outcome)

    def _done(self, claim: records.Claim, page: _Page[R], outcome: str) -> None:
        assert claim.dispatch is not None
        page.claimed.report.count(claim.dispatch.action_type, outcome)
        page.open -= 1
        if page.open == 0:
            self._observe(page)

    def _observe(self, page: _Page[R]) -> None:
        if self._observer is not None:
            self._observer(page.claimed.report, time.monotonic() - page.claimed.started)

    def _withdraw_unused(self) -> None:
        """Announcements beyond the items left to take: withdrawn, so that no barrier waits
        for an item that is not coming (called under the lock, after the queue shrank)."""
        excess = self._announced - min(self._idle, len(self._queue))
        for _ in range(max(excess, 0)):
            self._items.withdraw()
            self._announced -= 1

    async def _give_back_queued(self) -> None:
        """Shutdown: claims still queued go back at once, not after the executes in front of
        them: another replica can take them now."""
        while True:
            async with self._lock:
                entry = self._queue.popleft() if self._queue else None
                self._withdraw_unused()
            if entry is None:
                return
            claim, page = entry
            assert claim.lease is not None
            assert claim.dispatch is not None
            self._done(claim, page, await self._items.give_back(claim.lease, claim.dispatch))
            self._poke()

    async def _renew_queued(self) -> None:
        """Renew every claimed item still waiting for a worker; drop those whose lease is lost.

        A page is claimed at once but executed `concurrency` at a time: without this, items at
        the back of a slow page would reach their start barrier on an expired lease.
        """
        kept: list[tuple[records.Claim, _Page[R]]] = []
        lost: list[tuple[records.Claim, _Page[R]]] = []
        while self._queue:
            claim, page = self._queue.popleft()
            assert claim.lease is not None
            try:
                renewal = await self._store.renew(
                    claim.lease, now_ms=self._clock.now_ms(), lease_ms=self._lease_ms
                )
            except errors.StoreError as exc:
                # Kept as it is: its start will find out whether the lease still holds.
                log.warning("lease.renew_failed", dispatch_id=claim.dispatch_id, code=exc.code)
                self._items.observe_renewal("error")
                kept.append((claim, page))
                continue
            if renewal.lease is None:
                self._items.observe_renewal(
                    "expired" if renewal.outcome is Outcome.EXPIRED else "conflict"
                )
                log.info(
                    "lease.renew_refused",
                    dispatch_id=claim.dispatch_id,
                    outcome=renewal.outcome.value,
                    reason=renewal.reason,
                )
                lost.append((claim, page))
                continue
            self._items.observe_renewal("renewed")
            kept.append((dataclasses.replace(claim, lease=renewal.lease), page))
        self._queue.extend(kept)
        self._withdraw_unused()
        for claim, page in lost:
            self._done(claim, page, "lease_lost")
        if lost:
            self._poke()
