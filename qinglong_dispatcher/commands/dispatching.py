"""Dispatching commands: the `run` daemon and `tick`."""

from __future__ import annotations

import argparse
import contextlib
import sys

import structlog

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.lifecycle import daemon, http
from qinglong_dispatcher.usecases import ticking

log = structlog.get_logger("qinglong_dispatcher.daemon")


def _report_plan_keys(found: ports.PlanKeyProbe) -> None:
    """What the start check found that blocks some plans, never the process: said once."""
    if found.not_in_ring:
        log.warning("plan_keys.not_in_ring", key_ids=list(found.not_in_ring))
    if found.newest_unreadable is not None:
        log.warning("plan_keys.newest_unreadable", code=found.newest_unreadable)


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The daemon until SIGTERM/SIGINT."""
    store = await common.open_store(settings, check_integrity=True)
    listener: http.Listener | None = None
    writer: ports.Store | None = None
    authority = contextlib.ExitStack()
    try:
        authority.enter_context(bootstrap.sole_daemon(settings))
        await store.check_durability()
        _report_plan_keys(await store.probe_plan_keys())
        if reasons := await store.ddl_capabilities():
            log.warning("store.ddl_capable_role", reasons=list(reasons))
        writer = await bootstrap.open_api_writer(settings)
        parts = bootstrap.build_daemon_parts(settings, store, clock.SystemClock(), acting=writer)
        listener = http.Listener(
            settings.metrics_host,
            settings.metrics_port,
            the_metrics=parts.metrics,
            health=parts.health,
        )
        try:
            port = listener.start()
        except OSError as exc:
            listener = None
            raise errors.ConfigurationError(
                f"QINGLONG_METRICS_PORT: cannot listen on "
                f"{settings.metrics_host}:{settings.metrics_port} ({exc.strerror})"
            ) from None
        log.info("daemon.listening", host=settings.metrics_host, port=port)
        return await daemon.Daemon(parts).run()
    finally:
        if listener is not None:
            listener.stop()
        if writer is not None:
            await writer.close()
        await store.close()
        authority.close()


async def cmd_tick(settings: Settings, args: argparse.Namespace) -> int:
    """One batch (or batches until nothing is due), then one reconcile pass."""
    store = await common.open_store(settings, check_integrity=True)
    the_clock = clock.SystemClock()
    try:
        await store.check_durability()
        _report_plan_keys(await store.probe_plan_keys())
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
