"""The wake-up port: a source that tells the cadence something may have become due."""

from __future__ import annotations

from typing import Protocol


class WakeupEvents(Protocol):
    """What a listener reports; every call comes from the event loop, none may block."""

    def wake(self) -> None:
        """Something may have become due: tick soon."""

    def listening(self) -> None:
        """The listener is (again) subscribed; notifications from now on arrive."""

    def lost(self, reason: str) -> None:
        """The listener's connection ended or could not be opened; it retries by itself."""


class WakeupListener(Protocol):
    """A source of wake-ups that keeps itself connected until cancelled."""

    async def run(self, events: WakeupEvents) -> None:
        """Listen, reconnecting with backoff after a loss, until the caller cancels."""

    async def resume(self) -> None:
        """Called before each tick looks for due work: a listener that stopped hearing while
        a wake-up was pending hears again from here on (bounded; never raises)."""
