"""The bench's notification phase: what telling people of failures costs the dispatch path.

Scratch stores of the profile take the same enqueue and dispatch of N plans by the replicas:
"off" with no subscription (the database keeps no event), "on" with one subscription to the
failure kinds only and a deliverer matching the outbox beside the replicas, as a daemon's
would. Every dispatch succeeds, a kind nobody hears: "on" pays the triggers' question whether
someone hears it and the deliverer's reads, never an event row or a post. The two alternate
(off, on, on, off, …) and each keeps its best round (the highest rate, the least CPU per
1,000 dispatches of the busiest replica): the machine's noise hits both alike.
"""

from __future__ import annotations

from typing import Any, Final

import anyio

from qinglong_dispatcher.bench import phases, scratch
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import notifications as n

FAILURE_KINDS: Final = (
    "dispatch.failed",
    "dispatch.blocked",
    "dispatch.recovery_required",
    "target.held",
)
ROUNDS: Final = 3
"""Rounds of each side."""


async def _round(settings: Settings, count: int, replicas: int, *, on: bool) -> dict[str, Any]:
    async with scratch.scratch(settings) as made:
        store = await made.open()
        try:
            if on:
                await store.add_subscription(
                    n.Subscription(
                        name="bench-failures",
                        url="http://127.0.0.1:9/bench",
                        secret_ref="env:QL_BENCH_UNUSED",
                        kinds=FAILURE_KINDS,
                    )
                )
            await phases.enqueue(made, count)
            if not on:
                return await phases.dispatch(made, count, replicas)
            from qinglong_dispatcher.notifying import deliverer

            stop = anyio.Event()
            beside = deliverer.Deliverer(store, owner="bench-notify")
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(beside.serve, stop)
                try:
                    figures = await phases.dispatch(made, count, replicas)
                finally:
                    stop.set()
            await beside.aclose()
            events = await store.delivery_stats()
            if events.pending or events.dead:
                raise AssertionError("bench: a success was told to a failures-only subscription")
            return figures
        finally:
            await store.close()


async def notify_ratio(settings: Settings, count: int, replicas: int) -> dict[str, Any]:
    """`dispatch_per_s` and `cpu_s_per_1000` off and on (each its best round), and the
    rates' on / off."""
    best: dict[bool, float] = {False: 0.0, True: 0.0}
    cpu: dict[bool, float] = {False: float("inf"), True: float("inf")}
    for number in range(ROUNDS):
        for on in (False, True) if number % 2 == 0 else (True, False):
            figures = await _round(settings, count, replicas, on=on)
            best[on] = max(best[on], float(figures["dispatch_per_s"]))
            cpu[on] = min(cpu[on], float(figures["cpu_s_per_1000"]))
    return {
        "dispatches": count,
        "kinds": list(FAILURE_KINDS),
        "per_s_off": round(best[False], 1),
        "per_s_on": round(best[True], 1),
        "ratio": round(best[True] / best[False], 3),
        "cpu_s_per_1000_off": round(cpu[False], 3),
        "cpu_s_per_1000_on": round(cpu[True], 3),
    }
