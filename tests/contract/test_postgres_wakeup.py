"""Wake-up on submit (cluster): what the database notifies, the listener's reconnects, and a
daemon on an hour-long cadence that still starts a submitted dispatch.

Order of delivery is the referee, not time: PostgreSQL delivers the notifications of
committed transactions in commit order, so once a marker NOTIFY sent afterwards has arrived,
every notification that was going to arrive has. An hour-long cadence means a tick that
happens at all after start-up was a wake-up's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import asyncpg
import pytest
from prometheus_client import parser

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher import clock as system_clock
from qinglong_dispatcher.adapters.cluster import wakeup as postgres_wakeup
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import states
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.lifecycle import daemon, metrics
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.daemon import free_port
from tests.support.dispatching import make_dispatcher

pytestmark = pytest.mark.postgres

DUE = postgres_wakeup.CHANNEL
MARKER = "qinglong_test_marker"
WAIT_S = 10


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


async def _eventually(predicate: Callable[[], object]) -> None:
    """Return once `predicate()` holds; fail after WAIT_S (a bound, not a speed)."""
    with anyio.fail_after(WAIT_S):
        while True:
            if predicate():
                return
            await anyio.sleep(0.01)


class Heard:
    """The channels notified, in delivery order, on one listening connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.channels: list[str] = []

    def __call__(self, _conn: Any, _pid: int, channel: str, _payload: str) -> None:
        self.channels.append(channel)

    async def settle(self) -> list[str]:
        """Every notification committed so far (a marker sent now arrives after them all)."""
        await self.conn.execute(f"NOTIFY {MARKER}")  # on the listening connection: after it
        await _eventually(lambda: MARKER in self.channels)
        heard = self.channels[: self.channels.index(MARKER)]
        del self.channels[: len(heard) + 1]
        return heard


@pytest.fixture
async def heard(database: str) -> AsyncIterator[Heard]:
    conn = await asyncpg.connect(stores.pg_url(database))
    listening = Heard(conn)
    await conn.add_listener(DUE, listening)
    await conn.add_listener(MARKER, listening)
    try:
        yield listening
    finally:
        await conn.close()


@pytest.fixture
async def runtime(database: str) -> AsyncIterator[postgres_store.PostgresStore]:
    store = await stores.open_postgres(stores.runtime_url(database), max_size=4)
    try:
        yield store
    finally:
        await store.close()


async def test_a_submit_notifies_once_per_transaction(database: str, heard: Heard) -> None:
    the_clock = system_clock.SystemClock()
    assert await heard.settle() == []
    await submit_runs_as_approver(database, the_clock, 3)  # three consumes, one transaction
    assert await heard.settle() == [DUE]
    await submit_runs_as_approver(database, the_clock, 1)
    assert await heard.settle() == [DUE]


async def test_claims_starts_and_completions_notify_nothing_a_yield_does(
    database: str, heard: Heard, runtime: postgres_store.PostgresStore
) -> None:
    the_clock = system_clock.SystemClock()
    await submit_runs_as_approver(database, the_clock, 2)
    assert await heard.settle() == [DUE]

    batch = await runtime.claim_due(now_ms=the_clock.now_ms(), owner="w1", limit=1, lease_ms=30_000)
    (claim,) = batch.claimed
    assert await heard.settle() == []  # a claim: nothing became due
    assert claim.lease is not None
    await runtime.release_preflight(
        claim.lease,
        mutation_id="yield-1",
        kind=states.ReleaseKind.YIELD,
        result_code="shutdown",
        retry_at_ms=None,
        now_ms=the_clock.now_ms(),
    )
    assert await heard.settle() == [DUE]  # given back at shutdown: due now, for anyone

    report = await make_dispatcher(runtime, the_clock, owner="w2").dispatch_batch()
    assert report.claims.get("claimed") == 2
    rows = await stores.raw(
        database,
        "SELECT count(*) AS n FROM qinglong.approved_action_dispatch_executions "
        "WHERE status = 'succeeded'",
    )
    assert rows[0]["n"] == 2
    assert await heard.settle() == []  # claimed, started, completed: no wake-up for anyone


@dataclasses.dataclass
class Recorded:
    """A `ports.WakeupEvents` that writes down what the listener reports."""

    events: list[str] = dataclasses.field(default_factory=list)

    def wake(self) -> None:
        self.events.append("wake")

    def listening(self) -> None:
        self.events.append("listening")

    def lost(self, reason: str) -> None:
        self.events.append(f"lost:{reason}")

    async def until(self, predicate: Callable[[list[str]], bool]) -> None:
        await _eventually(lambda: predicate(self.events))


def _listener_sessions(database: str, select: str) -> str:
    return (
        f"SELECT {select} FROM pg_stat_activity WHERE datname = '{database}' "
        f"AND application_name = '{postgres_wakeup.APPLICATION_NAME}'"
    )


async def _terminate_listener(database: str) -> int:
    rows = await stores.raw("postgres", _listener_sessions(database, "pg_terminate_backend(pid)"))
    return len(rows)


async def test_the_listener_wakes_and_listens_again_after_its_backend_is_terminated(
    database: str,
) -> None:
    the_clock = system_clock.SystemClock()
    recorded = Recorded()
    listener = postgres_wakeup.PostgresWakeup(
        stores.runtime_url(database), backoff_initial_s=0.05, backoff_max_s=0.2
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run, recorded)
        await recorded.until(lambda e: "listening" in e)
        woken = recorded.events.count("wake")
        await submit_runs_as_approver(database, the_clock, 1)
        await recorded.until(lambda e: e.count("wake") > woken)

        assert await _terminate_listener(database) == 1
        await recorded.until(lambda e: e.count("listening") == 2)
        lost = [e for e in recorded.events if e.startswith("lost:")]
        assert len(lost) == 1, recorded.events
        # Whatever was submitted while nobody listened: one wake-up right after subscribing.
        again = len(recorded.events) - 1 - recorded.events[::-1].index("listening")
        assert recorded.events[again + 1 : again + 2] == ["wake"], recorded.events
        woken = recorded.events.count("wake")
        await submit_runs_as_approver(database, the_clock, 1)
        await recorded.until(lambda e: e.count("wake") > woken)
        tg.cancel_scope.cancel()
    # Cancelled, the listener closes its own connection (the backend then ends by itself).
    with anyio.fail_after(WAIT_S):
        while True:
            if not await stores.raw("postgres", _listener_sessions(database, "pid")):
                break
            await anyio.sleep(0.05)


async def test_a_notification_stops_the_hearing_until_resume_and_resume_hears_again(
    database: str,
) -> None:
    recorded = Recorded()
    listener = postgres_wakeup.PostgresWakeup(stores.runtime_url(database))
    # A login that holds no role at all may NOTIFY: that is why the listener must not pay
    # for every notification.
    nobody = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.run, recorded)
            await recorded.until(lambda e: e == ["listening", "wake"])
            await nobody.execute(f"NOTIFY {DUE}")
            await recorded.until(lambda e: e.count("wake") == 2)
            for _ in range(300):  # one transaction each, while the wake-up is pending
                await nobody.execute(f"NOTIFY {DUE}")
            flood = recorded.events.count("wake") - 2
            await listener.resume()  # what the daemon does before its tick looks
            heard = recorded.events.count("wake")
            await nobody.execute(f"NOTIFY {DUE}")
            await recorded.until(lambda e: e.count("wake") > heard)
            tg.cancel_scope.cancel()
    finally:
        await nobody.close()
    assert flood < 30, f"{flood} of 300 notifications heard while a wake-up was pending"
    assert not [e for e in recorded.events if e.startswith("lost:")]


def _metric(the_metrics: metrics.Metrics, name: str) -> float:
    for family in parser.text_string_to_metric_families(the_metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(name)


async def _succeeded(store: postgres_store.PostgresStore, dispatch_id: str) -> None:
    with anyio.fail_after(WAIT_S):
        while True:
            row = await store.get_execution(dispatch_id)
            if row is not None and row.status is ExecutionStatus.SUCCEEDED:
                return
            await anyio.sleep(0.02)


def _parts(database: str, store: postgres_store.PostgresStore, cadence_s: float) -> daemon.Parts:
    settings = load_settings(
        profile="cluster",
        database_url=stores.runtime_url(database),
        environ={
            "QINGLONG_CADENCE_SECONDS": str(cadence_s),
            "QINGLONG_RECONCILE_SECONDS": "3600",
            "QINGLONG_OWNER_ID": "replica-w",
            "QINGLONG_SHUTDOWN_GRACE_SECONDS": "5",
        },
    )
    assert settings.wakeup_on_submit  # the cluster profile's default
    return bootstrap.build_daemon_parts(settings, store, system_clock.SystemClock())


async def test_a_daemon_on_an_hour_long_cadence_starts_a_submit_at_once(
    database: str, runtime: postgres_store.PostgresStore
) -> None:
    parts = _parts(database, runtime, cadence_s=3600)
    assert isinstance(parts.wakeup, postgres_wakeup.PostgresWakeup)
    the_daemon = daemon.Daemon(parts)
    up = "qinglong_dispatcher_wakeup_listener_up"
    async with anyio.create_task_group() as tg:
        tg.start_soon(the_daemon.run)
        await _eventually(lambda: the_daemon.ticks >= 1 and _metric(parts.metrics, up) == 1)
        # Past the start-up tick and the one the subscription asks for: from here on, with an
        # hour-long cadence, only a notification can make the daemon tick.
        await anyio.sleep(0.5)
        ticks = the_daemon.ticks
        for _ in range(2):
            (consumed,) = await submit_runs_as_approver(database, system_clock.SystemClock(), 1)
            await _succeeded(runtime, consumed.dispatch_id)
        assert the_daemon.ticks > ticks
        assert _metric(parts.metrics, "qinglong_dispatcher_wakeups_total") >= 2
        the_daemon.request_stop()


async def test_with_the_listener_down_the_cadence_still_dispatches(
    database: str, runtime: postgres_store.PostgresStore
) -> None:
    parts = _parts(database, runtime, cadence_s=0.2)
    # Nothing listens on this port: every connect is refused, the listener keeps retrying.
    parts.wakeup = postgres_wakeup.PostgresWakeup(
        f"postgresql://nobody@127.0.0.1:{free_port()}/none",
        backoff_initial_s=0.05,
        backoff_max_s=0.1,
    )
    the_daemon = daemon.Daemon(parts)
    async with anyio.create_task_group() as tg:
        tg.start_soon(the_daemon.run)
        consumed = await submit_runs_as_approver(database, system_clock.SystemClock(), 3)
        for item in consumed:
            await _succeeded(runtime, item.dispatch_id)
        assert _metric(parts.metrics, "qinglong_dispatcher_wakeup_listener_up") == 0
        assert _metric(parts.metrics, "qinglong_dispatcher_wakeup_listener_reconnects_total") == 0
        the_daemon.request_stop()
