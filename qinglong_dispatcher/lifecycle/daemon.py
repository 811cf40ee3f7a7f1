"""`run`: one async process owning the cadence, reconcile pass, renewals, metrics and shutdown.

Ticks dispatch pages (a full page is followed at once, up to the per-tick cap); on cluster
a wake-up listener (a consumed approval's NOTIFY) brings the next tick forward; the
reconciler runs on its own slower cadence; a watchdog loop pings systemd when the cadence is
longer than half its timeout. An expected store fault is logged and the next tick tries
again; anything else is a bug and stops the process. On SIGTERM the dispatcher drains:
nothing more is claimed, claimed items that have not started are given back, and running
executes get the grace period (their leases still renewed) before the process exits 0.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Protocol

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.lifecycle import (
    cadence,
    http,
    metrics,
    pass_gauges,
    pruning,
    shutdown,
    skew,
    systemd,
    wakeup,
)
from qinglong_dispatcher.recovery import reconciler
from qinglong_dispatcher.usecases import ticking

log = structlog.get_logger("qinglong_dispatcher.daemon")


class _MeteredGuard:
    """The skew guard as the tick's clock check: each reading on the gauge, each refusal
    counted and logged."""

    def __init__(self, guard: skew.SkewGuard, the_metrics: metrics.Metrics) -> None:
        self._guard = guard
        self._metrics = the_metrics

    async def check(self, database: skew.DatabaseClock) -> skew.SkewReading:
        reading = await self._guard.check(database)
        self._metrics.set_clock_skew(-reading.skew_seconds)
        if not reading.allowed:
            self._metrics.record_clock_skew_refusal()
            log.warning(
                "daemon.clock_skew",
                skew_s=round(reading.skew_seconds, 3),
                bound_s=self._guard.max_skew_seconds,
            )
        return reading


class Service(Protocol):
    """A side service the daemon owns (the control-plane API): bound before the loops start,
    served in the daemon's task group until the stop, closed gracefully then."""

    async def start(self) -> None:
        """Bind; `ConfigurationError` (one line) when the address cannot be used."""
        ...

    async def serve(self, stop: anyio.Event) -> None:
        """Serve until `stop` is set, then close gracefully (bounded)."""
        ...

    async def aclose(self) -> None:
        """Stop serving and close every connection; safe to call twice."""
        ...


@dataclasses.dataclass(kw_only=True)
class Parts:
    """What the composition root hands the daemon."""

    settings: Settings
    store: ports.Store
    clock: ports.Clock
    dispatcher: dispatcher.Dispatcher
    reconciler: reconciler.Reconciler
    metrics: metrics.Metrics
    health: http.Health
    notifier: systemd.Notifier
    skew_guard: skew.SkewGuard | None = None
    wakeup: ports.WakeupListener | None = None
    """Cluster: notifications that bring the next dispatch tick forward (None: cadence only)."""
    pruner: pruning.Pruner | None = None
    """Edge with a retention: prunes finished dispatch trees after each reconcile pass."""
    api: Service | None = None
    """The control-plane API (`QINGLONG_API_LISTEN`; None: off, its code never imported)."""
    deliverer: Service | None = None
    """The notification deliverer (`QINGLONG_NOTIFY_DELIVER`; None: off)."""


class Daemon:
    """The lifecycle owner; `run` returns the exit status."""

    def __init__(self, parts: Parts) -> None:
        self._p = parts
        self._stop = anyio.Event()
        self._dispatch_done = anyio.Event()
        self._waker = wakeup.Waker()
        self._clock_guard = (
            None if parts.skew_guard is None else _MeteredGuard(parts.skew_guard, parts.metrics)
        )
        self._found_work = False  # the last tick moved a row (the wake budget)
        self._ready = False
        self._status = ""
        self._unsafe = ""
        self._unwritable = ""
        self.ticks = 0

    def request_stop(self) -> None:
        """Begin a graceful stop (what the first signal does)."""
        self._stop.set()

    async def run(self) -> int:
        """Serve until stopped; exit 0 after a graceful drain."""
        p = self._p
        log.info(
            "daemon.started",
            profile=p.settings.profile,
            owner=p.settings.owner_id,
            cadence_s=p.settings.cadence_seconds,
            wakeup=p.wakeup is not None,
        )
        if p.api is not None:
            await p.api.start()  # a taken address stops the start here, before any claim
        if p.deliverer is not None:
            await p.deliverer.start()
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(shutdown.watch, self._stop)
                # Ready only once a SIGTERM is heard: a rollout that stops a replica as soon
                # as it reports ready must get a drain, not the signal's default death.
                p.health.set_store(reachable=True, migrated=True)
                tg.start_soon(self._dispatch_loop)
                tg.start_soon(self._reconcile_loop)
                if p.wakeup is not None:
                    tg.start_soon(p.wakeup.run, wakeup.Signals(self._waker, p.metrics))
                if p.notifier.watchdog_interval_s is not None:
                    tg.start_soon(self._watchdog_loop, p.notifier.watchdog_interval_s)
                if p.api is not None:
                    tg.start_soon(p.api.serve, self._stop)
                if p.deliverer is not None:
                    tg.start_soon(p.deliverer.serve, self._stop)
                await self._stop.wait()
                await self._drain()
                tg.cancel_scope.cancel()
        finally:
            for service in (p.api, p.deliverer):
                if service is not None:
                    with anyio.CancelScope(shield=True):
                        await service.aclose()
        await p.dispatcher.aclose()
        await p.reconciler.aclose()
        log.info("daemon.stopped", ticks=self.ticks)
        return 0

    async def _wake_handler_waits(self) -> None:
        """Dispatches that waited for a handler this process has are due now, not after their
        backoff: installing an action and restarting is what they waited for. A store fault
        here costs only that: the waits become due at their own time."""
        p = self._p
        try:
            woken = await p.store.wake_handler_waits(
                p.dispatcher.action_types, now_ms=p.clock.now_ms()
            )
        except errors.StoreError as exc:
            log.warning("daemon.handler_waits_not_woken", code=exc.code)
            return
        if woken:
            log.info("daemon.handler_waits_woken", count=len(woken), first_ids=list(woken[:5]))

    async def _drain(self) -> None:
        p = self._p
        grace = p.settings.shutdown_grace_seconds
        p.health.set_draining()
        p.notifier.stopping("draining")
        p.notifier.extend_timeout(grace + 5)
        p.dispatcher.drain()
        with anyio.move_on_after(grace) as scope:
            await self._dispatch_done.wait()
        if scope.cancelled_caught:
            log.warning("daemon.grace_expired", grace_s=grace)

    async def _dispatch_loop(self) -> None:
        try:
            # Before the first tick, inside the task group: a stop signal is already heard.
            await self._wake_handler_waits()
            schedule = cadence.Cadence(self._p.settings.cadence_seconds)
            waker = self._waker if self._p.wakeup is not None else None
            while await schedule.wait(self._stop, waker):
                if self._p.wakeup is not None:
                    await self._p.wakeup.resume()  # hearing again before the tick looks
                ok = await self.tick()
                if self._found_work:
                    schedule.found_work()
                self._after_tick(ok)
        finally:
            self._dispatch_done.set()

    def _after_tick(self, ok: bool) -> None:
        p = self._p
        p.health.beat()
        if not ok:
            return
        if not self._ready:
            self._ready = True
            p.notifier.ready("dispatching")
            log.info("daemon.ready")
        p.notifier.watchdog()

    async def tick(self) -> bool:
        """One tick: the store's writability, the dispatch tick the `tick` command runs too
        (`usecases.ticking`: the skew and synchronous-standby checks, pages of dispatch), the
        backlog gauges."""
        p = self._p
        started = time.monotonic()
        self.ticks += 1
        self._found_work = False
        if self._unwritable and not await self._writes_allowed():
            p.metrics.record_tick(ok=False)
            return False
        try:
            done = await ticking.tick(
                p.dispatcher,
                p.store,
                guard=self._clock_guard,
                max_pages=p.settings.max_pages_per_tick,
                durable=self._durability_allows,
                stopping=self._stop.is_set,
                on_batch=self._observe_batch,
            )
            if done.refused:
                p.metrics.record_tick(ok=False)
                return False
            backlog = await p.store.backlog(now_ms=p.clock.now_ms())
        except errors.StoreFull as exc:
            # Not one event per tick: the store gave up its disk reserve to checkpoint, and
            # says what space it waits for; the next ticks ask it, and claim nothing till then.
            self._set_unwritable(await p.store.write_problem() or str(exc), code=exc.code)
            p.metrics.record_tick(ok=False)
            return False
        except errors.StoreError as exc:
            log.warning(
                "daemon.tick_failed",
                code=exc.code,
                error=exc.__class__.__name__,
                message=str(exc),
            )
            p.metrics.record_tick(ok=False)
            p.health.set_store(reachable=not isinstance(exc, errors.StoreUnavailable))
            p.health.set_writes(str(exc))
            return False
        # An idle tick writes nothing, so it cannot tell; ask what would stop a write.
        problem = await p.store.write_problem()
        self._set_unwritable(problem)
        if problem:
            p.metrics.record_tick(ok=False)
            return False
        age = backlog.oldest_due_age_ms or 0
        p.metrics.set_backlog(
            due=backlog.due,
            oldest_due_age_s=age / 1000,
            executing=backlog.executing,
            recovery_required=backlog.recovery_required,
        )
        p.metrics.record_tick(ok=True)
        p.health.set_store(reachable=True, migrated=True)
        summary = (
            f"due={backlog.due} executing={backlog.executing} "
            f"recovery_required={backlog.recovery_required}"
        )
        if summary != self._status:
            self._status = summary
            p.notifier.status(summary)
        log.debug("daemon.tick", duration_s=round(time.monotonic() - started, 4), due=backlog.due)
        return True

    async def _writes_allowed(self) -> bool:
        """While the store cannot be written, ask it again before claiming anything: a tick
        that claimed would only meet the full disk or the read-only file again. When it sees
        nothing in the way the tick tries, and only a tick that got through says writable
        (PostgreSQL cannot tell a full disk in advance: it would say so every other tick)."""
        problem = await self._p.store.write_problem()
        if problem:
            self._set_unwritable(problem)
        return not problem

    def _set_unwritable(self, problem: str, *, code: str | None = None) -> None:
        """Readiness follows `problem`; the log says when it starts and when it ends, once
        each, not once per tick (the reason's wording, free space included, may change)."""
        if problem and not self._unwritable:
            extra = {} if code is None else {"code": code}
            log.warning("daemon.store_not_writable", message=problem, **extra)
        elif not problem and self._unwritable:
            log.info("daemon.store_writable")
        self._unwritable = problem
        self._p.health.set_writes(problem)

    def _observe_batch(self, report: dispatcher.BatchReport, seconds: float) -> None:
        # Work is a row that moved: a due row nobody may claim yet must not refund every
        # woken tick.
        self._found_work = self._found_work or ticking.moved(report)
        self._p.metrics.observe_batch(
            seconds,
            claims=dict(report.claims),
            outcomes={k: dict(v) for k, v in report.by_action.items()},
            takeovers=report.takeovers,
            takeovers_exhausted=report.takeovers_exhausted,
        )

    async def _reconcile_loop(self) -> None:
        p = self._p
        schedule = cadence.Cadence(p.settings.reconcile_seconds)
        while await schedule.wait(self._stop):
            await self._recheck_durability()
            try:
                report = await p.reconciler.reconcile_pass()
            except errors.StoreError as exc:
                log.warning("recovery.pass_failed", code=exc.code)
                continue
            p.metrics.record_reconcile_pass(
                resolved_by_evidence=report.outcomes.get("resolved_succeeded", 0),
                approvals_expired=report.approvals_expired,
                reminders=report.approval_reminders,
            )
            p.metrics.targets.expired_past_window.inc(report.windows_expired)
            await pass_gauges.read(p.store, p.clock, p.metrics)
            await self._prune()

    async def _durability_allows(self) -> bool:
        """With `QINGLONG_REQUIRE_SYNC_STANDBY`, a tick claims nothing while the primary has
        no synchronous standby: an HA manager that drops a lost standby from the synchronous
        list (Patroni's `synchronous_mode` without `_strict`) would otherwise let the daemon
        start actions on commits that only the primary holds."""
        if not self._p.settings.require_sync_standby:
            return True
        await self._recheck_durability()
        return not self._unsafe

    async def _recheck_durability(self) -> None:
        """With `QINGLONG_REQUIRE_SYNC_STANDBY`, readiness follows the standby: what `run`
        refused at start fails readiness, and stops the claims, while it lasts. The process
        stays up and is ready again, and claims again, once the standby is back."""
        p = self._p
        if not p.settings.require_sync_standby:
            return
        try:
            await p.store.check_durability()
        except errors.DurabilityRefused as exc:
            if not self._unsafe:  # once per loss, not once per pass
                log.warning("daemon.durability_lost", code=exc.code, message=str(exc))
            self._unsafe = str(exc)
        except errors.StoreError:
            return  # the dispatch tick reports an unreachable store itself
        else:
            if self._unsafe:
                log.info("daemon.durability_restored")
            self._unsafe = ""
        p.health.set_durability(self._unsafe)

    async def _prune(self) -> None:
        p = self._p
        if p.pruner is None:
            return
        try:
            await p.pruner.daemon_pass(
                retention_days=p.settings.retention_days,
                audit_retention_days=p.settings.audit_retention_days,
            )
        except errors.StoreError as exc:
            # A busy or full file: the next reconcile pass prunes again.
            log.warning("prune.pass_failed", code=exc.code, error=exc.__class__.__name__)

    async def _watchdog_loop(self, interval_s: float) -> None:
        p = self._p
        while True:
            await anyio.sleep(interval_s)
            alive, _ = p.health.alive()
            if alive and self._ready:
                p.notifier.watchdog()
