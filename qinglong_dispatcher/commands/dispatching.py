"""Dispatching commands: the `run` daemon and `tick`."""

from __future__ import annotations

import argparse

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.lifecycle import daemon
from qinglong_dispatcher.settings import Settings


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The daemon until SIGTERM/SIGINT."""
    store = await common.open_store(settings)
    try:
        await store.check_durability()
        the_clock = clock.SystemClock()
        return await daemon.run(
            settings, store, bootstrap.build_dispatcher(settings, store, the_clock)
        )
    finally:
        await store.close()


async def cmd_tick(settings: Settings, args: argparse.Namespace) -> int:
    """One batch (or batches until nothing is due), then one reconcile pass."""
    store = await common.open_store(settings)
    the_clock = clock.SystemClock()
    try:
        await store.check_durability()
        the_dispatcher = bootstrap.build_dispatcher(settings, store, the_clock)
        totals: dict[str, int] = {}
        observed = batches = 0
        max_pages = args.max_pages if args.drain else 1
        while batches < max_pages:
            report = await the_dispatcher.dispatch_batch()
            batches += 1
            observed += report.observed
            for key, n in report.outcomes.items():
                totals[key] = totals.get(key, 0) + n
            if report.observed == 0 or not args.drain:
                break
        reconciled = await bootstrap.build_reconciler(store, the_clock).reconcile_pass()
        result = {
            "batches": batches,
            "observed": observed,
            "outcomes": dict(sorted(totals.items())),
            "reconcile": reconciled.as_dict(),
        }
        if args.json:
            common.print_json(result)
        else:
            summary = ", ".join(f"{k}={v}" for k, v in sorted(totals.items())) or "nothing due"
            print(f"{batches} batch(es), {observed} observed: {summary}")
            if reconciled.observed:
                settled = ", ".join(f"{k}={v}" for k, v in sorted(reconciled.outcomes.items()))
                print(f"reconcile: {reconciled.observed} recovery_required: {settled}")
        return common.EXIT_OK
    finally:
        await store.close()
