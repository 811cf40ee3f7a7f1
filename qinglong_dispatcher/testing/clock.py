"""The kit's clock: it starts at a fixed instant in the past and moves only when told."""

from __future__ import annotations

START_MS = 1_700_000_000_000
"""2023-11-14. In the past on purpose: deciding that a started lease has expired takes the
earlier of the caller's clock and the database's, so the database must agree that a lease
this clock let expire has expired."""


class ManualClock:
    """A `ports.Clock` a test moves by hand (`advance`)."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        """The current (manual) time."""
        return self.ms

    def advance(self, seconds: float) -> None:
        """Move forward by `seconds`."""
        if seconds < 0:
            raise ValueError("the clock never moves back")
        self.ms += round(seconds * 1000)
