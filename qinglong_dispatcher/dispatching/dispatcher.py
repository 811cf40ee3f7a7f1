"""`dispatch_batch`: one due observation, then each claimed item carried by `ItemRunner`.

The dispatcher owns no timer: the lifecycle (or `tick`) calls `dispatch_batch`. It claims a
page, works it `concurrency` items at a time, keeps the queued claims' leases alive, and on
shutdown gives back what has not started (`claimed_item` has the per-item protocol).
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Mapping, Sequence

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import claimed_item, page_path, passages
from qinglong_dispatcher.dispatching.claimed_item import FaultHook, RenewalObserver
from qinglong_dispatcher.dispatching.dispatch_config import DispatchConfig
from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.domain.records import Outcome

log = structlog.get_logger("qinglong_dispatcher.dispatcher")

__all__ = ["BatchReport", "DispatchConfig", "Dispatcher", "FaultHook", "RenewalObserver"]


FIRST_IDS = 5
"""How many dispatch ids a page's `dispatch.claimed` event names (with the page's count)."""
CLAIMS_DEFERRED_MAX = 15
"""How many batches in a row full passages may put off the claim (decision 0055)."""


@dataclasses.dataclass(kw_only=True)
class BatchReport:
    """What one batch did: claim results, and what became of each claimed item."""

    page_size: int
    observed: int = 0
    """The most rows one observation found: the claim's, or one passage's."""
    claim_observed: int = 0
    """What the claim observed (0 when full passages put it off)."""
    passages_full: bool = False
    """Whether a passage passed a whole passage page (more of that action may be due)."""
    claims: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_action: dict[str, collections.Counter[str]] = dataclasses.field(default_factory=dict)
    takeovers: int = 0
    """Claims that replaced another owner's expired lease."""
    takeovers_exhausted: int = 0
    """Rows blocked because every claim of them died before the barrier (a poison pill)."""

    @property
    def full_page(self) -> bool:
        """Whether the claim's observation filled the page, or a passage filled its own: more
        may be due."""
        return self.passages_full or self.claim_observed >= self.page_size

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
        self._passages = passages.Passages(store, handlers, clock, config)
        self._claims_deferred = 0

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
        config = self._config
        report = BatchReport(page_size=config.page_size)
        if self.draining:
            return report
        # Transactional actions first: a passage commits its page whole, nothing to give back.
        # After a full one more is due, most likely more of the same: the claim waits a few
        # batches (the other actions' rows are never starved), then takes only other actions'
        # rows, so that the passages keep theirs.
        passed = await self._passages.run(report.count)
        report.observed = passed.observed
        report.passages_full = passed.full
        if passed.passed:  # the report names only the outcomes that happened
            report.claims[Outcome.CLAIMED.value] += passed.passed
        if passed.full and self._claims_deferred < CLAIMS_DEFERRED_MAX:
            self._claims_deferred += 1
            return report
        self._claims_deferred = 0
        batch = await self._store.claim_due(
            now_ms=self._clock.now_ms(),
            owner=config.owner,
            limit=config.page_size,
            lease_ms=config.lease_ms,
            skip_action_types=passed.full_types,
        )
        now_ms = self._clock.now_ms()
        report.claim_observed = batch.observed
        report.observed = max(report.observed, batch.observed)
        self._passages.claimed(c.dispatch.action_type for c in batch.claims if c.dispatch)
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
        queue = collections.deque(claimed)
        # Taking an item from the queue and renewing the queued ones exclude each other, so a
        # worker never starts with a version the renewal has just made stale.
        queue_lock = anyio.Lock()
        waiting = anyio.CancelScope()
        keeping = anyio.CancelScope()

        async def next_claim() -> records.Claim | None:
            async with queue_lock:
                return queue.popleft() if queue else None

        async def work() -> None:
            announced = True  # see `announce` below
            try:
                while (claim := await next_claim()) is not None:
                    assert claim.lease is not None
                    assert claim.dispatch is not None
                    if self.draining:
                        outcome = await self._items.give_back(claim.lease, claim.dispatch)
                    else:
                        first, announced = announced, False
                        outcome = await self._items.process(
                            claim.lease,
                            claim.dispatch,
                            announced=first,
                            taken_over=claim.taken_over is not None,
                        )
                    report.count(claim.dispatch.action_type, outcome)
            finally:
                if announced:
                    self._items.withdraw()

        async def give_back_on_drain() -> None:
            # Claimed items still queued when shutdown begins go back at once, not after the
            # executes in front of them: another replica can take them now.
            with waiting:
                await self._draining.wait()
            if waiting.cancel_called:
                return
            while (claim := await next_claim()) is not None:
                assert claim.lease is not None
                assert claim.dispatch is not None
                outcome = await self._items.give_back(claim.lease, claim.dispatch)
                report.count(claim.dispatch.action_type, outcome)

        async def keep_queued_leases() -> None:
            with keeping:
                while True:
                    await anyio.sleep(config.lease_ms / 3000)
                    async with queue_lock:
                        await self._renew_queued(queue, report)

        async with anyio.create_task_group() as tg:
            tg.start_soon(give_back_on_drain)
            tg.start_soon(keep_queued_leases)
            # The workers' first items reach their start barriers together: announced before
            # any of them runs, so their barriers commit in one transaction.
            starting = min(config.concurrency, len(queue))
            self._items.announce(starting)
            async with anyio.create_task_group() as workers:
                for _ in range(starting):
                    workers.start_soon(work)
            waiting.cancel()
            keeping.cancel()
        return report

    async def _renew_queued(
        self, queue: collections.deque[records.Claim], report: BatchReport
    ) -> None:
        """Renew every claimed item still waiting for a worker; drop those whose lease is lost.

        A page is claimed at once but executed `concurrency` at a time: without this, items at
        the back of a slow page would reach their start barrier on an expired lease.
        """
        kept: list[records.Claim] = []
        while queue:
            claim = queue.popleft()
            assert claim.lease is not None
            assert claim.dispatch is not None
            try:
                renewal = await self._store.renew(
                    claim.lease, now_ms=self._clock.now_ms(), lease_ms=self._config.lease_ms
                )
            except errors.StoreError as exc:
                # Kept as it is: its start will find out whether the lease still holds.
                log.warning("lease.renew_failed", dispatch_id=claim.dispatch_id, code=exc.code)
                self._items.observe_renewal("error")
                kept.append(claim)
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
                report.count(claim.dispatch.action_type, "lease_lost")
                continue
            self._items.observe_renewal("renewed")
            kept.append(dataclasses.replace(claim, lease=renewal.lease))
        queue.extend(kept)

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
