"""`run`: the dispatch loop on the profile's cadence until SIGTERM/SIGINT."""

from __future__ import annotations

import random
import signal

import anyio
import structlog

from qinglong_dispatcher import dispatcher, ports
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.settings import Settings

log = structlog.get_logger("qinglong_dispatcher.daemon")


async def tick(
    the_dispatcher: dispatcher.Dispatcher, *, max_pages: int
) -> list[dispatcher.BatchReport]:
    """One tick: a batch, and the next at once while pages come back full, up to the cap."""
    reports = []
    for _ in range(max_pages):
        report = await the_dispatcher.dispatch_batch()
        reports.append(report)
        if not report.full_page:
            break
    return reports


async def run(settings: Settings, store: ports.Store, the_dispatcher: dispatcher.Dispatcher) -> int:
    """Loop until a signal; an expected store fault is logged and the next tick tries again."""
    rng = random.Random()
    stop = anyio.Event()

    async def watch_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("daemon.stopping", signal=signal.Signals(signum).name)
                stop.set()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_signals)
        log.info("daemon.started", profile=settings.profile, owner=settings.owner_id)
        while not stop.is_set():
            try:
                await tick(the_dispatcher, max_pages=settings.max_pages_per_tick)
            except errors.StoreError as exc:
                log.warning("daemon.tick_failed", code=exc.code)
            delay = settings.cadence_seconds * rng.uniform(0.9, 1.1)
            with anyio.move_on_after(delay):
                await stop.wait()
        tg.cancel_scope.cancel()
    log.info("daemon.stopped")
    return 0
