"""The cluster's wake-up listener: one connection per replica `LISTEN`s on the channel that
migration 0010's triggers `NOTIFY` when an execution becomes due now (a consumed approval,
a shutdown yield).

The connection is its own, outside the pool: the pool lends a connection to one transaction
at a time and drops its listeners when it is released. A loss (terminated backend, reset
socket, a probe that gets no answer) is reported, then the listener reconnects with jittered
exponential backoff; the daemon's cadence dispatches meanwhile. After every (re)subscription
it reports one wake-up, for whatever was submitted while nobody listened.

Any login may `NOTIFY` the channel, and every notification delivered costs this process a
few microseconds of parsing and callbacks whatever it then does with it. So a notification
that arrives while the listener hears is reported and the listener stops hearing
(`UNLISTEN`): a wake-up is now pending, and more notifications would add nothing to it. The
daemon calls `resume()` before each tick, which listens again before that tick looks for due
work, so a submit that commits after the tick's look still notifies; one that committed
before it is what the tick finds. A flood then costs a few notifications per tick, and the
ticks are bounded by the cadence's token bucket.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import anyio
import asyncpg

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import driver_errors

CHANNEL = "qinglong_dispatch_due"
"""The channel of migration 0010's `qinglong.notify_dispatch_due()`; NOTIFY is per database."""

APPLICATION_NAME = "qinglong-dispatcher-wakeup"
"""How the listener's session shows in `pg_stat_activity` (apart from the pool's)."""


_RESUME_FAILURES: tuple[type[BaseException], ...] = (TimeoutError, *driver_errors.DRIVER_ERRORS)
"""What ends the connection when `LISTEN` again fails: a silent server, or a driver error."""


def _reason(exc: BaseException) -> str:
    """A low-sensitivity description of why the listener's connection failed."""
    state = getattr(exc, "sqlstate", None)
    name = exc.__class__.__name__
    return f"{name} {state}" if state else name


class PostgresWakeup:
    """`ports.WakeupListener` over one dedicated asyncpg connection."""

    def __init__(
        self,
        url: str,
        *,
        probe_interval_s: float = 10.0,
        probe_timeout_s: float = 5.0,
        connect_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        resume_timeout_s: float = 1.0,
        rng: random.Random | None = None,
    ) -> None:
        self._url = url
        self._probe_interval_s = probe_interval_s
        self._probe_timeout_s = probe_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._resume_timeout_s = resume_timeout_s
        self._rng = rng or random.Random()
        self._conn: Any = None  # the subscribed connection, None between connections
        self._hearing = False  # LISTEN is in effect on it
        self._lock = anyio.Lock()  # one statement at a time on the connection
        self._pause = False  # a notification asked the loop to stop hearing
        self._attention = anyio.Event()  # the loop has something to do: a pause or an end

    async def resume(self) -> None:
        """See `ports.WakeupListener.resume`: `LISTEN` again if a notification paused it.

        A failure or a silent server ends the connection (bounded by `resume_timeout_s`): the
        listener reconnects, and reports a wake-up once it has subscribed again.
        """
        self._pause = False  # the tick about to look covers every notification heard so far
        conn = self._conn
        if conn is None or self._hearing:
            return
        try:
            with anyio.fail_after(self._resume_timeout_s):
                async with self._lock:
                    if self._conn is conn and not self._hearing and not conn.is_closed():
                        await conn.execute(f"LISTEN {CHANNEL}")
                        self._hearing = True
        except _RESUME_FAILURES:
            conn.terminate()

    async def run(self, events: ports.WakeupEvents) -> None:
        """See `ports.WakeupListener.run`: listen, and after each loss reconnect, until
        cancelled."""
        delay = self._backoff_initial_s
        while True:
            reason, subscribed = await self._listen_once(events)
            events.lost(reason)
            if subscribed:
                delay = self._backoff_initial_s
            # Jittered, so replicas that lost the server together do not return in lock step.
            await anyio.sleep(delay * self._rng.uniform(0.5, 1.0))
            delay = min(delay * 2, self._backoff_max_s)

    async def _listen_once(self, events: ports.WakeupEvents) -> tuple[str, bool]:
        """One connection's life: (why it ended, whether it had subscribed)."""
        try:
            conn: Any = await asyncpg.connect(
                self._url,
                timeout=self._connect_timeout_s,
                server_settings={"application_name": APPLICATION_NAME},
            )
        except driver_errors.DRIVER_ERRORS as exc:
            return _reason(exc), False
        ended = False

        def on_end(_conn: Any) -> None:
            nonlocal ended
            ended = True
            self._attention.set()

        def on_notification(*_notification: Any) -> None:
            events.wake()
            if self._hearing:  # a wake-up is pending now: stop hearing until `resume()`
                self._pause = True
                self._attention.set()

        subscribed = False
        try:
            conn.add_termination_listener(on_end)
            await conn.add_listener(CHANNEL, on_notification)
            self._conn, self._hearing, subscribed = conn, True, True
            events.listening()
            events.wake()
            while True:
                with anyio.move_on_after(self._probe_interval_s):
                    await self._attention.wait()
                if self._attention.is_set():
                    self._attention = anyio.Event()
                if ended or conn.is_closed():
                    return "connection closed", subscribed
                async with self._lock:
                    # A network that went silent closes nothing: either statement also asks
                    # whether the server answers, within a bound.
                    statement = "SELECT 1"
                    if self._pause and self._hearing:
                        statement = f"UNLISTEN {CHANNEL}"
                        self._hearing = False
                    self._pause = False
                    await conn.execute(statement, timeout=self._probe_timeout_s)
        except driver_errors.DRIVER_ERRORS as exc:
            return _reason(exc), subscribed
        finally:
            self._conn, self._hearing, self._pause = None, False, False
            await _close(conn)


async def _close(conn: Any) -> None:
    """Close politely within a bound (also when cancelled), else drop the socket."""
    if conn.is_closed():
        return
    with anyio.move_on_after(2, shield=True):
        with contextlib.suppress(*driver_errors.DRIVER_ERRORS):
            await conn.close(timeout=2)
    if not conn.is_closed():
        conn.terminate()
