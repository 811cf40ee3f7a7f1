"""The drift-corrected cadence, on a clock the test moves."""

from __future__ import annotations

import random

from qinglong_dispatcher.lifecycle import cadence


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_schedule_keeps_absolute_time_and_never_bunches() -> None:
    clock = FakeTime()
    schedule = cadence.Cadence(1.0, jitter=0.0, clock=clock)
    assert schedule.delay() == 0  # the first tick runs at once
    assert schedule.delay() == 1.0
    clock.now += 0.3  # a tick took 0.3 s: the next is still due at t=102
    assert abs(schedule.delay() - 1.7) < 1e-9
    clock.now += 5  # an overrun: the next tick runs at once, once
    assert schedule.delay() == 0
    assert schedule.delay() == 1.0


def test_jitter_stays_within_ten_percent() -> None:
    clock = FakeTime()
    schedule = cadence.Cadence(2.0, clock=clock, rng=random.Random(7))
    assert schedule.delay() == 0
    delays = []
    for _ in range(200):
        delay = schedule.delay()
        delays.append(delay)
        clock.now += delay
    assert min(delays) >= 1.8
    assert max(delays) <= 2.2
    assert len({round(d, 6) for d in delays}) > 1
