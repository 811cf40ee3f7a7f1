"""The cluster's wake-up listener: one connection per replica `LISTEN`s on the channel that
migration 0010's triggers `NOTIFY` when an execution becomes due now (a consumed approval,
a shutdown yield).

The connection is its own, outside the pool: the pool lends a connection to one transaction
at a time and drops its listeners when it is released. A loss (terminated backend, reset
socket, a probe that gets no answer) is reported, then the listener reconnects with jittered
exponential backoff; the daemon's cadence dispatches meanwhile. After every (re)subscription
it reports one wake-up, for whatever was submitted while nobody listened.
"""

from __future__ import annotations

import contextlib
import random
from typing import Any

import anyio
import asyncpg

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import database as db

CHANNEL = "qinglong_dispatch_due"
"""The channel of migration 0010's `qinglong.notify_dispatch_due()`; NOTIFY is per database."""

APPLICATION_NAME = "qinglong-dispatcher-wakeup"
"""How the listener's session shows in `pg_stat_activity` (apart from the pool's)."""


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
        rng: random.Random | None = None,
    ) -> None:
        self._url = url
        self._probe_interval_s = probe_interval_s
        self._probe_timeout_s = probe_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()

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
        except db.DRIVER_ERRORS as exc:
            return _reason(exc), False
        ended = anyio.Event()
        subscribed = False
        try:
            conn.add_termination_listener(lambda _conn: ended.set())
            await conn.add_listener(CHANNEL, lambda *_notification: events.wake())
            subscribed = True
            events.listening()
            events.wake()
            while True:
                with anyio.move_on_after(self._probe_interval_s):
                    await ended.wait()
                if ended.is_set() or conn.is_closed():
                    return "connection closed", subscribed
                # A network that went silent closes nothing: ask, within a bound.
                await conn.execute("SELECT 1", timeout=self._probe_timeout_s)
        except db.DRIVER_ERRORS as exc:
            return _reason(exc), subscribed
        finally:
            await _close(conn)


async def _close(conn: Any) -> None:
    """Close politely within a bound (also when cancelled), else drop the socket."""
    if conn.is_closed():
        return
    with anyio.move_on_after(2, shield=True):
        with contextlib.suppress(*db.DRIVER_ERRORS):
            await conn.close(timeout=2)
    if not conn.is_closed():
        conn.terminate()
