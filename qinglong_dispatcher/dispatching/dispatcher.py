"""`dispatch_pages` and `dispatch_batch`: due observations claimed a page at a time, each
claimed item carried by `ItemRunner`.

The dispatcher owns no timer: the lifecycle (or `tick`) calls `dispatch_pages`. It claims a
page, commits its transactional items in the page transaction, and hands the rest to
`concurrency` workers that carry the items of every page of the call (`page_flow`: the next
page is claimed once the page before has a worker for every item, the queued claims' leases
are kept alive, and on shutdown what has not started is given back; `claimed_item` has the
per-item protocol).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import time
from collections.abc import Callable, Mapping, Sequence

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import claimed_item, page_flow, page_path
from qinglong_dispatcher.dispatching.claimed_item import DispatchConfig, FaultHook, RenewalObserver
from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.domain.records import Outcome

log = structlog.get_logger("qinglong_dispatcher.dispatcher")

__all__ = ["BatchReport", "DispatchConfig", "Dispatcher", "FaultHook", "RenewalObserver"]


FIRST_IDS = 5
"""How many dispatch ids a page's `dispatch.claimed` event names (with the page's count)."""


@dataclasses.dataclass(kw_only=True)
class BatchReport:
    """What one batch did: claim results, and what became of each claimed item."""

    page_size: int
    observed: int = 0
    claims: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_action: dict[str, collections.Counter[str]] = dataclasses.field(default_factory=dict)
    takeovers: int = 0
    """Claims that replaced another owner's expired lease."""
    takeovers_exhausted: int = 0
    """Rows blocked because every claim of them died before the barrier (a poison pill)."""

    @property
    def full_page(self) -> bool:
        """Whether the observation filled the page (more may be due)."""
        return self.observed >= self.page_size

    def count(self, action_type: str, outcome: str) -> None:
        """Add one item outcome."""
        self.outcomes[outcome] += 1
        self.by_action.setdefault(action_type, collections.Counter())[outcome] += 1


class Dispatcher:
    """Runs bounded batches of approved actions under fenced leases."""

    def __init__(
        self,
        store: ports.DispatchStore,
        handlers: Mapping[str, ports.ApprovedActionHandler],
        clock: ports.Clock,
        config: DispatchConfig,
        *,
        rng: random.Random | None = None,
        fault_hook: FaultHook | None = None,
        on_renewal: RenewalObserver | None = None,
    ) -> None:
        self._store = store
        self._handlers = dict(handlers)
        self._clock = clock
        self._config = config
        self._draining = anyio.Event()
        self._items = claimed_item.ItemRunner(
            store,
            handlers,
            clock,
            config,
            draining=self._draining.is_set,
            rng=rng,
            fault_hook=fault_hook,
            on_renewal=on_renewal,
        )
        self._page = page_path.PagePath(store, handlers, clock, config, fault_hook=fault_hook)

    async def aclose(self) -> None:
        """Release what the handlers hold (an HTTP client's connections), once no batch runs."""
        for handler in self._handlers.values():
            if isinstance(handler, ports.Closable):
                await handler.aclose()

    @property
    def action_types(self) -> frozenset[str]:
        """The action types this dispatcher has a handler for."""
        return frozenset(self._handlers)

    def drain(self) -> None:
        """Shutdown: claim nothing more; give back claimed items that have not started."""
        self._draining.set()

    @property
    def draining(self) -> bool:
        """Whether `drain` was called."""
        return self._draining.is_set()

    async def dispatch_batch(self) -> BatchReport:
        """Claim one page of due executions and carry each as far as it may go."""
        if self.draining:
            return BatchReport(page_size=self._config.page_size)
        (report,) = await self.dispatch_pages(max_pages=1)
        return report

    async def dispatch_pages(
        self,
        *,
        max_pages: int,
        stopping: Callable[[], bool] = lambda: False,
        on_batch: Callable[[BatchReport, float], None] | None = None,
    ) -> list[BatchReport]:
        """Claim pages while each comes back full, up to `max_pages`, until `stopping()` or a
        drain; the next page is claimed once the page before has a worker for every item,
        not once its slowest item is done (`page_flow`). Returns the pages' reports in claim
        order, when every item has its outcome; `on_batch` hears of each page as it ends."""
        if self.draining:
            return []
        flow: page_flow.PageFlow[BatchReport] = page_flow.PageFlow(
            self._store,
            self._items,
            self._clock,
            concurrency=self._config.concurrency,
            lease_ms=self._config.lease_ms,
            draining=self._draining,
        )
        return await flow.run(
            self._claim_page, max_pages=max_pages, stopping=stopping, on_page=on_batch
        )

    async def _claim_page(self) -> page_flow.ClaimedPage[BatchReport]:
        """One due observation claimed; its transactional items through the page
        transaction; the claims left for the workers."""
        config = self._config
        started = time.monotonic()
        batch = await self._store.claim_due(
            now_ms=self._clock.now_ms(),
            owner=config.owner,
            limit=config.page_size,
            lease_ms=config.lease_ms,
        )
        now_ms = self._clock.now_ms()
        report = BatchReport(page_size=config.page_size, observed=batch.observed)
        for claim in batch.claims:
            report.claims[claim.outcome.value] += 1
            if claim.outcome is Outcome.EXHAUSTED:
                log.warning("dispatch.exhausted", dispatch_id=claim.dispatch_id, code=claim.reason)
                if claim.reason == states.TAKEOVERS_EXHAUSTED:
                    # Whoever claimed it died before its barrier, time after time: the action
                    # itself is the suspect, and the dispatch needs a person.
                    report.takeovers_exhausted += 1
                    log.error("dispatch.poison_suspected", dispatch_id=claim.dispatch_id)
            if claim.taken_over is not None and claim.lease is not None:
                # Another owner's lease ran out before its start: that owner stalled or died.
                report.takeovers += 1
                log.warning(
                    "lease.taken_over",
                    dispatch_id=claim.dispatch_id,
                    previous_owner=claim.taken_over.owner,
                    attempt=claim.lease.attempt,
                    expired_for_ms=max(now_ms - claim.taken_over.expires_at_ms, 0),
                )
        claimed: Sequence[records.Claim] = batch.claimed
        if claimed:
            # One event for the page's claims, kept short: the count and the first few ids (the
            # ledger has every claim; `dispatch.page_committed` names what committed).
            log.info(
                "dispatch.claimed",
                count=len(claimed),
                first_ids=[c.dispatch_id for c in claimed[:FIRST_IDS]],
            )
        await self._prefetch(claimed)
        if not self.draining:
            claimed = await self._page.run(claimed, report.count)
        return page_flow.ClaimedPage(report=report, claims=claimed, started=started)

    async def _prefetch(self, claims: Sequence[records.Claim]) -> None:
        """Let handlers read what the page's inspects need in one go (saves a read per item)."""
        by_type: dict[str, list[records.Dispatch]] = {}
        for claim in claims:
            if claim.dispatch is not None:
                by_type.setdefault(claim.dispatch.action_type, []).append(claim.dispatch)
        for action_type, dispatches in by_type.items():
            handler = self._handlers.get(action_type)
            if isinstance(handler, ports.PrefetchingHandler):
                try:
                    await handler.prefetch(dispatches)
                except errors.StoreError as exc:
                    log.warning("dispatch.prefetch_failed", action_type=action_type, code=exc.code)
