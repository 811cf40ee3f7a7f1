"""Graceful shutdown of the daemon with a slow execute in flight, on every dialect."""

from __future__ import annotations

import signal

import anyio

from qinglong_dispatcher import clock as system_clock
from qinglong_dispatcher.config.settings import Settings, load_settings
from qinglong_dispatcher.dispatching import dispatcher
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.lifecycle import daemon, http, metrics, systemd
from qinglong_dispatcher.recovery import reconciler
from tests.support.actions import submit_runs
from tests.support.handlers import RecordingHandler
from tests.support.stores import Harness


def _daemon(
    harness: Harness,
    settings: Settings,
    handlers: dict[str, RecordingHandler],
    health: http.Health,
    on_renewal: dispatcher.RenewalObserver | None = None,
) -> daemon.Daemon:
    """The daemon over `harness`'s store with one dispatcher (owner w1, one at a time)."""
    the_clock = system_clock.SystemClock()
    the_dispatcher = dispatcher.Dispatcher(
        harness.store,
        handlers,
        the_clock,
        dispatcher.DispatchConfig(
            owner="w1",
            page_size=16,
            lease_ms=1500,
            concurrency=1,
            retry_backoff_ms=1000,
            execute_timeout_ms=1400,
        ),
        on_renewal=on_renewal,
    )
    return daemon.Daemon(
        daemon.Parts(
            settings=settings,
            store=harness.store,
            clock=the_clock,
            dispatcher=the_dispatcher,
            reconciler=reconciler.Reconciler(harness.store, {}, the_clock),
            metrics=metrics.Metrics(
                profile="edge", cadence_s=settings.cadence_seconds, process_metrics=False
            ),
            health=health,
            notifier=systemd.Notifier(environ={}),
        )
    )


async def test_shutdown_lets_the_running_execute_finish_and_yields_the_rest(
    harness: Harness,
) -> None:
    the_clock = system_clock.SystemClock()
    consumed = await submit_runs(harness.approver_store, the_clock, 3)
    settings = load_settings(
        environ={
            "QINGLONG_CADENCE_SECONDS": "0.05",
            "QINGLONG_LEASE_SECONDS": "1.5",
            "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "1.4",
            "QINGLONG_SHUTDOWN_GRACE_SECONDS": "5",
        }
    )
    handler = RecordingHandler(execute_sleep_s=1.0)
    renewals: list[str] = []

    def record_renewal(result: str) -> None:
        renewals.append(result)

    the_daemon = _daemon(
        harness,
        settings,
        {"run.create": handler},
        http.Health(cadence_s=0.05),
        on_renewal=record_renewal,
    )
    status: list[int] = []

    async def run() -> None:
        status.append(await the_daemon.run())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(10):
            await handler.started.wait()
        the_daemon.request_stop()
    assert status == [0]
    assert len(handler.executed) == 1
    assert "renewed" in renewals
    rows = {c.dispatch_id: await harness.store.get_execution(c.dispatch_id) for c in consumed}
    finished = rows[handler.executed[0]]
    assert finished is not None
    assert finished.status is ExecutionStatus.SUCCEEDED
    given_back = [r for k, r in rows.items() if k != handler.executed[0]]
    for row in given_back:
        assert row is not None
        assert (row.status, row.attempt) == (ExecutionStatus.PENDING, 0)
        assert row.eligible_at_ms is not None
        assert row.eligible_at_ms <= the_clock.now_ms()
        assert row.result_code == "shutdown"


class _SignalAtReadiness(http.Health):
    """Health that notes what SIGTERM would do at the moment the daemon first reports ready."""

    def __init__(self) -> None:
        super().__init__(cadence_s=60)
        self.sigterm_at_ready: list[object] = []
        self.became_ready = anyio.Event()

    def set_store(self, *, reachable: bool, migrated: bool | None = None) -> None:
        if reachable and migrated and not self.sigterm_at_ready:
            self.sigterm_at_ready.append(signal.getsignal(signal.SIGTERM))
        super().set_store(reachable=reachable, migrated=migrated)
        if self.ready()[0]:
            self.became_ready.set()


async def test_readiness_is_reported_only_once_a_sigterm_is_heard(harness: Harness) -> None:
    """A rollout stops a replica as soon as `/readyz` says 200: by then SIGTERM must start a
    drain, never the signal's default death."""
    health = _SignalAtReadiness()
    the_daemon = _daemon(
        harness, load_settings(environ={"QINGLONG_CADENCE_SECONDS": "60"}), {}, health
    )
    assert health.ready() == (False, "store unreachable")
    status: list[int] = []

    async def run() -> None:
        status.append(await the_daemon.run())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(10):
            await health.became_ready.wait()
        the_daemon.request_stop()
    assert status == [0]
    assert len(health.sigterm_at_ready) == 1
    assert health.sigterm_at_ready[0] not in (signal.SIG_DFL, signal.SIG_IGN, None)
