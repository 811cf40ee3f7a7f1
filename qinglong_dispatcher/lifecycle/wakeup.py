"""Wake-up on submit: a listener's signals cut the dispatch cadence's wait short.

The port (`ports.WakeupListener`) is what a dialect provides (cluster: PostgreSQL `LISTEN`, in the
postgres adapter; edge has none: one process and its cadence). `Signals` is the daemon's side
of it: it coalesces notifications into one early tick (`Waker`), keeps the listener gauge and
reconnect counter, and logs the listener's state changes under stable event names. The
cadence stays the floor: while the listener is down nothing changes but the latency.
"""

from __future__ import annotations

import anyio
import structlog

from qinglong_dispatcher.lifecycle import metrics

log = structlog.get_logger("qinglong_dispatcher.wakeup")


class Waker:
    """Coalesces wake-ups: any number of `wake()` calls before the next `take()` are one."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def wake(self) -> None:
        """Ask for an early tick (idempotent until taken)."""
        self._event.set()

    def is_set(self) -> bool:
        """Whether a wake-up is waiting to be taken."""
        return self._event.is_set()

    async def wait(self) -> None:
        """Return once a wake-up is waiting."""
        await self._event.wait()

    def take(self) -> bool:
        """Consume the waiting wake-up, if any; later `wake()` calls arm a fresh one."""
        if not self._event.is_set():
            return False
        self._event = anyio.Event()  # an anyio event cannot be cleared, only replaced
        return True


class Signals:
    """The daemon's `ports.WakeupEvents`: wakes its `Waker`, moves metrics, logs state changes."""

    def __init__(self, waker: Waker, the_metrics: metrics.Metrics) -> None:
        self._waker = waker
        self._metrics = the_metrics
        self._ever_listened = False
        self._outage_logged = False

    def wake(self) -> None:
        """See `ports.WakeupEvents.wake`."""
        self._metrics.record_wakeup()
        self._waker.wake()

    def listening(self) -> None:
        """See `ports.WakeupEvents.listening`: after a loss this is a reconnect, and counted."""
        reconnect = self._ever_listened
        self._ever_listened = True
        self._outage_logged = False
        self._metrics.set_wakeup_listener(up=True, reconnected=reconnect)
        log.info("wakeup.listening", reconnect=reconnect)

    def lost(self, reason: str) -> None:
        """See `ports.WakeupEvents.lost`: one warning per outage, failed retries at debug."""
        self._metrics.set_wakeup_listener(up=False)
        if self._outage_logged:
            log.debug("wakeup.retry_failed", reason=reason)
            return
        self._outage_logged = True
        log.warning("wakeup.lost", reason=reason, fallback="cadence")
