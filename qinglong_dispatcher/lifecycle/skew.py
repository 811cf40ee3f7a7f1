"""The cluster skew guard: no claims while the system clock and the database clock disagree.

Leases are written with the replica's clock and compared by every other replica, so a
replica whose wall clock runs ahead would take over live leases early. The guard compares
the SYSTEM wall clock (never the injectable test clock: that one is supposed to lie) with
the database server's clock and fails closed while the difference exceeds the bound
(`QINGLONG_MAX_CLOCK_SKEW_SECONDS`, docs/state-machine.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Protocol


class DatabaseClock(Protocol):
    """What the guard reads: the cluster store's `database_now_ms()`."""

    async def database_now_ms(self) -> int:
        """The database server's wall clock, in epoch milliseconds."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SkewReading:
    """One measurement: skew = database clock - system clock (positive: database ahead)."""

    skew_seconds: float
    round_trip_seconds: float
    allowed: bool


class SkewGuard:
    """Measures the skew and says whether claiming is allowed; keeps what metrics need."""

    def __init__(
        self,
        max_skew_seconds: float,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if max_skew_seconds <= 0:
            raise ValueError("max_skew_seconds must be positive")
        self.max_skew_seconds = max_skew_seconds
        self._wall_clock = wall_clock
        self.last_skew_seconds = 0.0
        """The last measured skew (the `qinglong_dispatcher_clock_skew_seconds` gauge)."""
        self.refusals = 0
        """Checks that refused claiming (a counter for the metrics issue)."""
        self.last: SkewReading | None = None

    async def check(self, database: DatabaseClock) -> SkewReading:
        """Measure once and decide. A store error propagates: the caller's tick handles it.

        The system clock is read before and after the query and the database's answer is
        compared with the midpoint, so network latency does not count as skew; half the
        round trip is the measurement's uncertainty, and it counts against the bound.
        """
        before = self._wall_clock()
        database_ms = await database.database_now_ms()
        after = self._wall_clock()
        round_trip = max(0.0, after - before)
        skew = database_ms / 1000 - (before + after) / 2
        allowed = abs(skew) + round_trip / 2 <= self.max_skew_seconds
        reading = SkewReading(skew_seconds=skew, round_trip_seconds=round_trip, allowed=allowed)
        self.last_skew_seconds = skew
        self.last = reading
        if not allowed:
            self.refusals += 1
        return reading
