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

WAKE_BURST = 4
"""Woken ticks that found nothing due, allowed back to back before the refill rate holds."""

WAKE_REFILL_S = 0.25
"""One more idle woken tick is allowed per this many seconds (a token bucket of WAKE_BURST).

Any login may NOTIFY the channel, so a flood must not buy a tick per gap (961 ticks in 10 s
at a 1 s cadence): a woken tick that found nothing due costs a token, one that found work is
refunded (`found_work`), so real submits keep their at-once start and a flood of empty
wake-ups costs at most WAKE_BURST + seconds / WAKE_REFILL_S ticks over the cadence's own."""


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
        wake_burst: int = WAKE_BURST,
        wake_refill_s: float = WAKE_REFILL_S,
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
        self._burst = wake_burst
        self._refill_s = wake_refill_s
        self._tokens = float(wake_burst)
        self._refilled_at = clock()
        self._charged = False  # the last tick was an early, woken one, paid with a token

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
        self._charged = False
        if waker is not None and waker.is_set():
            hold = self._wake_hold()
            if hold > 0:
                with anyio.move_on_after(hold):
                    await stop.wait()
                if stop.is_set():
                    return False
            waker.take()
            now = self._clock()
            if self._due is None or now < self._due:  # early: the wake-up's own tick
                self._refill(now)
                self._tokens -= 1
                self._charged = True
                self._due = now
        self._last_start = self._clock()
        return True

    def found_work(self) -> None:
        """The tick just run found something due: a woken one gets its token back."""
        if self._charged:
            self._charged = False
            self._tokens = min(float(self._burst), self._tokens + 1)

    def _refill(self, now: float) -> None:
        self._tokens = min(
            float(self._burst), self._tokens + (now - self._refilled_at) / self._refill_s
        )
        self._refilled_at = now

    def _wake_hold(self) -> float:
        """Seconds a woken tick waits: the gap after the last start, and a token if none is
        left; never past the scheduled tick, which takes the wake-up with it."""
        now = self._clock()
        self._refill(now)
        hold = 0.0
        if self._last_start is not None:
            hold = self._last_start + self._wake_gap_s - now
        if self._tokens < 1:
            hold = max(hold, (1 - self._tokens) * self._refill_s)
        if self._due is not None:
            hold = min(hold, self._due - now)
        return hold


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
