"""The dispatch tick: no claim while the clocks disagree (cluster), then pages of dispatch while
a page comes back full, up to a cap.

The daemon ticks on its cadence (`lifecycle.daemon`, which adds its gauges, readiness and
store checks around it); the `tick` command ticks once, or one page a tick until a tick
observes nothing (`--drain`). Both call this, so the command claims as the daemon does.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import records

MOVED = (records.Outcome.CLAIMED, records.Outcome.REPLAYED, records.Outcome.EXHAUSTED)
"""Claim outcomes that changed a row."""


class ClockReading(Protocol):
    """One skew measurement (`lifecycle.skew.SkewReading`)."""

    @property
    def skew_seconds(self) -> float:
        """The database clock minus the system clock."""
        ...

    @property
    def allowed(self) -> bool:
        """Whether the skew is within the bound: claiming is allowed."""
        ...


class ClockGuard(Protocol):
    """The cluster's skew guard (`lifecycle.skew.SkewGuard`): measures, and decides."""

    async def check(self, database: ports.Store) -> ClockReading:
        """Measure the skew against the database's clock once."""
        ...


BatchObserver = Callable[[dispatcher.BatchReport, float], None]
"""Told each batch's report and its duration in seconds, as soon as it is done."""


@dataclasses.dataclass(kw_only=True, slots=True)
class Tick:
    """What one tick did."""

    refused: bool = False
    """A check before the first claim refused (`skew` says so when it was the clocks)."""
    skew: ClockReading | None = None
    """The skew measured before claiming (None: edge, one machine, one clock)."""
    batches: int = 0
    observed: int = 0
    claims: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    def add(self, report: dispatcher.BatchReport) -> None:
        """Count one batch."""
        self.batches += 1
        self.observed += report.observed
        self.claims.update(report.claims)
        self.outcomes.update(report.outcomes)

    def merge(self, other: Tick) -> None:
        """Count another tick's batches too (the `tick` command's totals)."""
        self.batches += other.batches
        self.observed += other.observed
        self.claims.update(other.claims)
        self.outcomes.update(other.outcomes)


def moved(report: dispatcher.BatchReport) -> bool:
    """Whether a claim of the batch moved a row: it found work. A due row nobody may claim yet
    (a live lease the database's clock still sees) is not work."""
    return any(report.claims[outcome] for outcome in MOVED)


async def tick(
    the_dispatcher: dispatcher.Dispatcher,
    store: ports.Store,
    *,
    guard: ClockGuard | None,
    max_pages: int,
    durable: Callable[[], Awaitable[bool]] | None = None,
    stopping: Callable[[], bool] = lambda: False,
    on_batch: BatchObserver | None = None,
) -> Tick:
    """Check the clocks (`guard`; None on edge), then `durable` (the daemon's synchronous
    standby check), then dispatch pages until one is not full, `stopping()` says so, or
    `max_pages` ran. A refusal claims nothing. A store error propagates: the caller's tick
    handles it."""
    done = Tick()
    if guard is not None:
        done.skew = await guard.check(store)
        if not done.skew.allowed:
            done.refused = True
            return done
    if durable is not None and not await durable():
        done.refused = True
        return done
    for _ in range(max_pages):
        started = time.monotonic()
        report = await the_dispatcher.dispatch_batch()
        done.add(report)
        if on_batch is not None:
            on_batch(report, time.monotonic() - started)
        if not report.full_page or stopping():
            break
    return done
