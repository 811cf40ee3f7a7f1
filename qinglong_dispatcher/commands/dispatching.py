"""Dispatching commands: the `run` daemon and `tick`."""

from __future__ import annotations

import argparse
import sys

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.usecases import ticking


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The daemon until SIGTERM/SIGINT: built by the composition root, run, closed."""
    async with bootstrap.open_daemon(settings) as the_daemon:
        return await the_daemon.run()


async def cmd_tick(settings: Settings, args: argparse.Namespace) -> int:
    """One batch (or batches until nothing is due), then one reconcile pass."""
    store = await common.open_store(settings, check_integrity=True)
    the_clock = clock.SystemClock()
    try:
        await bootstrap.check_store(store)
        the_dispatcher = bootstrap.build_dispatcher(settings, store, the_clock)
        max_pages = args.max_pages if args.drain else 1
        guard = bootstrap.skew_guard(settings)
        total = ticking.Tick()
        # The daemon's tick, one page a tick: the clocks are checked before every page.
        while total.batches < max_pages:
            done = await ticking.tick(the_dispatcher, store, guard=guard, max_pages=1)
            if done.skew is not None and not done.skew.allowed:
                print(
                    f"{common.PROG}: error: clock skew {done.skew.skew_seconds:+.3f}s exceeds "
                    f"QINGLONG_MAX_CLOCK_SKEW_SECONDS ({settings.max_clock_skew_seconds}); "
                    "not claiming",
                    file=sys.stderr,
                )
                return common.EXIT_REFUSED
            total.merge(done)
            if done.observed == 0 or not args.drain:
                break
        await the_dispatcher.aclose()
        the_reconciler = bootstrap.build_reconciler(store, the_clock, settings=settings)
        try:
            reconciled = await the_reconciler.reconcile_pass()
        finally:
            await the_reconciler.aclose()
        outcomes = sorted(total.outcomes.items())
        result = {
            "batches": total.batches,
            "observed": total.observed,
            "claims": dict(sorted(total.claims.items())),
            "outcomes": dict(outcomes),
            "reconcile": reconciled.as_dict(),
        }
        if args.json:
            common.print_json(result)
        else:
            summary = ", ".join(f"{k}={v}" for k, v in outcomes) or "nothing due"
            print(f"{total.batches} batch(es), {total.observed} observed: {summary}")
            if reconciled.observed:
                settled = ", ".join(f"{k}={v}" for k, v in sorted(reconciled.outcomes.items()))
                print(f"reconcile: {reconciled.observed} recovery_required: {settled}")
        return common.EXIT_OK
    finally:
        await store.close()
