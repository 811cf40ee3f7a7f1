"""Pruning passes: bounded batches until nothing is left, for `prune` and the edge daemon."""

from __future__ import annotations

import dataclasses
import time

import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import retention
from qinglong_dispatcher.lifecycle import metrics as metrics_mod

log = structlog.get_logger("qinglong_dispatcher.prune")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PassReport:
    """One pass: what went (or, dry, would go), in how many batches, and pages given back."""

    counts: retention.PruneCounts
    batches: int
    complete: bool
    """False when the pass stopped at its batch cap with trees still left."""
    pages_freed: int = 0


class Pruner:
    """Runs prune batches against one store; the edge daemon calls `daemon_pass` per reconcile."""

    def __init__(
        self,
        store: ports.PruneStore,
        clock: ports.Clock,
        *,
        metrics: metrics_mod.Metrics | None = None,
        batch_limit: int = retention.BATCH_LIMIT,
    ) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._limit = batch_limit

    async def prune(
        self,
        cutoffs: retention.Cutoffs,
        *,
        dry_run: bool = False,
        max_batches: int | None = None,
    ) -> PassReport:
        """Batches until one comes back short (nothing left), or `max_batches` ran."""
        if dry_run:
            counts = await self._store.prune_batch(
                cutoff_ms=cutoffs.dispatch_before_ms,
                audit_cutoff_ms=cutoffs.audit_before_ms,
                limit=self._limit,
                dry_run=True,
            )
            return PassReport(counts=counts, batches=0, complete=True)
        total = retention.PruneCounts()
        batches = 0
        started = time.monotonic()
        while max_batches is None or batches < max_batches:
            batch_started = time.monotonic()
            counts = await self._store.prune_batch(
                cutoff_ms=cutoffs.dispatch_before_ms,
                audit_cutoff_ms=cutoffs.audit_before_ms,
                limit=self._limit,
            )
            batches += 1
            total += counts
            if self._metrics is not None:
                self._metrics.record_pruned(counts)
            if not counts.empty:
                log.info(
                    "prune.batch",
                    dispatches=counts.dispatches,
                    audit_events=counts.audit_events,
                    notification_events=counts.notification_events,
                    notification_deliveries=counts.notification_deliveries,
                    duration_s=round(time.monotonic() - batch_started, 4),
                )
            if counts.short_of(self._limit):
                complete = True
                break
        else:
            complete = False
        log.info(
            "prune.pass",
            dispatches=total.dispatches,
            audit_events=total.audit_events,
            notification_events=total.notification_events,
            notification_deliveries=total.notification_deliveries,
            batches=batches,
            complete=complete,
            duration_s=round(time.monotonic() - started, 4),
        )
        return PassReport(counts=total, batches=batches, complete=complete)

    async def daemon_pass(
        self, *, retention_days: float, audit_retention_days: float
    ) -> PassReport:
        """The edge daemon's pass: prune by the configured retentions, then give space back."""
        cutoffs = retention.Cutoffs.at(
            self._clock.now_ms(),
            retention_ms=retention.days_ms(retention_days),
            audit_retention_ms=retention.days_ms(audit_retention_days),
        )
        return await self.prune_and_reclaim(cutoffs)

    async def prune_and_reclaim(self, cutoffs: retention.Cutoffs) -> PassReport:
        """A bounded pass, then up to `VACUUM_PAGES` free pages handed back to the system."""
        report = await self.prune(cutoffs, max_batches=retention.MAX_BATCHES_PER_PASS)
        freed = await self._store.reclaim_space(max_pages=retention.VACUUM_PAGES)
        if freed:
            log.info("prune.vacuum", pages=freed)
        return dataclasses.replace(report, pages_freed=freed)
