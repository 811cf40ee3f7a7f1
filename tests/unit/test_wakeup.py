"""Wake-ups and the cadence: a wake cuts the wait short, bursts coalesce, the schedule moves.

The cadence runs on a clock the test holds still, with an interval of an hour: a wait that
returns at all was woken (or stopped), and nothing here asserts how fast.
"""

from __future__ import annotations

import anyio
from prometheus_client import parser

from qinglong_dispatcher.lifecycle import cadence, metrics, wakeup

HOUR = 3600.0


class StillTime:
    """A monotonic clock that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _schedule(clock: StillTime, *, gap: float = 0.0) -> cadence.Cadence:
    return cadence.Cadence(HOUR, jitter=0.0, clock=clock, wake_gap_s=gap)


async def test_a_wake_cuts_the_wait_short_and_takes_the_place_of_the_scheduled_tick() -> None:
    clock, stop, waker = StillTime(), anyio.Event(), wakeup.Waker()
    schedule = _schedule(clock)
    with anyio.fail_after(10):
        assert await schedule.wait(stop, waker)  # the first tick is due at once
        clock.now += 5
        waker.wake()
        assert await schedule.wait(stop, waker)  # an hour early: woken
    assert not waker.is_set()
    # The woken tick replaced the scheduled one: the next is due one interval after it.
    assert schedule.delay() == HOUR


async def test_a_wake_while_waiting_returns_the_wait() -> None:
    clock, stop, waker = StillTime(), anyio.Event(), wakeup.Waker()
    schedule = _schedule(clock)
    returned: list[bool] = []

    async def wait() -> None:
        returned.append(await schedule.wait(stop, waker))

    with anyio.fail_after(10):
        assert await schedule.wait(stop, waker)
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert returned == []  # asleep on the hour-long cadence
            waker.wake()
    assert returned == [True]


async def test_many_wakes_before_a_wait_are_one_early_tick() -> None:
    clock, stop, waker = StillTime(), anyio.Event(), wakeup.Waker()
    schedule = _schedule(clock)
    returned: list[bool] = []

    async def wait() -> None:
        returned.append(await schedule.wait(stop, waker))

    with anyio.fail_after(10):
        assert await schedule.wait(stop, waker)
        for _ in range(5):
            waker.wake()
        assert await schedule.wait(stop, waker)
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert returned == []  # the five wakes were spent on one tick
            stop.set()
    assert returned == [False]


async def test_a_wake_right_after_a_tick_waits_out_the_gap_and_a_stop_ends_it() -> None:
    clock, stop, waker = StillTime(), anyio.Event(), wakeup.Waker()
    schedule = _schedule(clock, gap=HOUR)
    returned: list[bool] = []

    async def wait() -> None:
        returned.append(await schedule.wait(stop, waker))

    with anyio.fail_after(10):
        assert await schedule.wait(stop, waker)
        waker.wake()
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            assert returned == []  # held back: the last tick began no gap ago
            waker.wake()  # more wakes during the hold change nothing
            stop.set()
    assert returned == [False]


async def test_without_a_waker_the_cadence_is_what_it_was() -> None:
    clock, stop = StillTime(), anyio.Event()
    schedule = _schedule(clock)
    with anyio.fail_after(10):
        assert await schedule.wait(stop)
        stop.set()
        assert not await schedule.wait(stop)


def _samples(the_metrics: metrics.Metrics) -> dict[str, float]:
    text = the_metrics.render().decode()
    return {
        sample.name: sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(metrics.PREFIX + "wakeup")
    }


async def test_signals_wake_count_and_track_the_listener() -> None:
    the_metrics = metrics.Metrics(profile="cluster", cadence_s=1.0, process_metrics=False)
    waker = wakeup.Waker()
    signals = wakeup.Signals(waker, the_metrics)
    assert _samples(the_metrics) == {
        "qinglong_dispatcher_wakeups_total": 0,
        "qinglong_dispatcher_wakeup_listener_up": 0,
        "qinglong_dispatcher_wakeup_listener_reconnects_total": 0,
    }
    signals.lost("OSError")  # the first connect failed: not a reconnect yet
    signals.listening()
    signals.wake()
    signals.wake()
    assert waker.take()
    assert not waker.take()
    assert _samples(the_metrics) == {
        "qinglong_dispatcher_wakeups_total": 2,
        "qinglong_dispatcher_wakeup_listener_up": 1,
        "qinglong_dispatcher_wakeup_listener_reconnects_total": 0,
    }
    signals.lost("connection closed")
    assert _samples(the_metrics)["qinglong_dispatcher_wakeup_listener_up"] == 0
    signals.lost("OSError")
    signals.listening()
    samples = _samples(the_metrics)
    assert samples["qinglong_dispatcher_wakeup_listener_up"] == 1
    assert samples["qinglong_dispatcher_wakeup_listener_reconnects_total"] == 1


async def _woken_ticks_before_a_hold(found_work: bool) -> int:
    """Wake and wait until a wait is held back; how many woken ticks ran (at most 5)."""
    clock, stop, waker = StillTime(), anyio.Event(), wakeup.Waker()
    schedule = cadence.Cadence(
        HOUR, jitter=0.0, clock=clock, wake_gap_s=0.0, wake_burst=2, wake_refill_s=HOUR
    )
    ticks = 0
    with anyio.fail_after(10):
        assert await schedule.wait(stop, waker)  # the first tick is due at once
        for _ in range(5):
            returned: list[bool] = []

            async def wait(into: list[bool] = returned) -> None:
                into.append(await schedule.wait(stop, waker))

            waker.wake()
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                if not returned:  # held for a token an hour away
                    tg.cancel_scope.cancel()
                    return ticks
            ticks += 1
            if found_work:
                schedule.found_work()
    return ticks


async def test_a_flood_of_idle_wakes_is_held_once_the_burst_is_spent() -> None:
    assert await _woken_ticks_before_a_hold(found_work=False) == 2


async def test_a_woken_tick_that_found_work_costs_nothing_from_the_burst() -> None:
    assert await _woken_ticks_before_a_hold(found_work=True) == 5
