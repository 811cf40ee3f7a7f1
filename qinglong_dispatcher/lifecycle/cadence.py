"""A drift-corrected, jittered cadence: ticks keep their schedule however long each one took."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import anyio

JITTER = 0.10
"""±10 % on each interval, so replicas started together do not tick in lock step."""


class Cadence:
    """Absolute-time schedule: the next tick is due one (jittered) interval after the last due
    time, not after the last tick finished; an overrun tick is followed at once, never twice."""

    def __init__(
        self,
        interval_s: float,
        *,
        jitter: float = JITTER,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.interval_s = interval_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._clock = clock
        self._due: float | None = None  # the first tick is due at once

    def _step(self) -> float:
        return self.interval_s * self._rng.uniform(1 - self._jitter, 1 + self._jitter)

    def delay(self) -> float:
        """Seconds until the next tick is due (0 when overdue); advances the schedule."""
        now = self._clock()
        self._due = now if self._due is None else max(self._due + self._step(), now)
        return self._due - now

    async def wait(self, stop: anyio.Event) -> bool:
        """Sleep until the next tick; False when `stop` was set first."""
        if stop.is_set():
            return False
        with anyio.move_on_after(self.delay()):
            await stop.wait()
        return not stop.is_set()
