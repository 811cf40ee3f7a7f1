"""A drift-corrected, jittered cadence: ticks keep their schedule however long each one took;
a wake-up (`wakeup.Waker`) may bring the next tick forward."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable

import anyio

from qinglong_dispatcher.lifecycle import wakeup

JITTER = 0.10
"""±10 % on each interval, so replicas started together do not tick in lock step."""

WAKE_GAP_S = 0.01
"""Least time between the starts of two ticks when the later one is a wake-up's: a burst of
notifications becomes one tick per gap, not one per notification."""


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
        wake_gap_s: float = WAKE_GAP_S,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval must be positive")
        self.interval_s = interval_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._clock = clock
        self._due: float | None = None  # the first tick is due at once
        self._wake_gap_s = wake_gap_s
        self._last_start: float | None = None

    def _step(self) -> float:
        return self.interval_s * self._rng.uniform(1 - self._jitter, 1 + self._jitter)

    def delay(self) -> float:
        """Seconds until the next tick is due (0 when overdue); advances the schedule."""
        now = self._clock()
        self._due = now if self._due is None else max(self._due + self._step(), now)
        return self._due - now

    async def wait(self, stop: anyio.Event, waker: wakeup.Waker | None = None) -> bool:
        """Sleep until the next tick, or until `waker` is woken; False when `stop` was set first.

        An early (woken) tick takes the place of the scheduled one: the next is due one interval
        after it. Wake-ups that arrive while a tick runs make one more tick right after it (at
        least `wake_gap_s` after the last one began), however many they were.
        """
        if stop.is_set():
            return False
        with anyio.move_on_after(self.delay()):
            await _first_of(stop, waker)
        if stop.is_set():
            return False
        if waker is not None and waker.is_set():
            if self._last_start is not None:
                hold = self._last_start + self._wake_gap_s - self._clock()
                if hold > 0:
                    with anyio.move_on_after(hold):
                        await stop.wait()
                    if stop.is_set():
                        return False
            waker.take()
            self._due = self._clock()
        self._last_start = self._clock()
        return True


async def _first_of(stop: anyio.Event, waker: wakeup.Waker | None) -> None:
    """Return when `stop` is set or `waker` woken, whichever comes first."""
    if waker is None:
        await stop.wait()
        return
    if waker.is_set():
        return
    async with anyio.create_task_group() as tg:

        async def then_cancel(wait: Callable[[], Awaitable[None]]) -> None:
            await wait()
            tg.cancel_scope.cancel()

        tg.start_soon(then_cancel, stop.wait)
        tg.start_soon(then_cancel, waker.wait)
