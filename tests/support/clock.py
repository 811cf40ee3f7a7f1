"""A clock tests move by hand."""

from __future__ import annotations

START_MS = 1_700_000_000_000
"""2023-11-14: in the past, so that the database clock (which settling decisions also consult)
agrees that a lease the manual clock let expire has expired."""


class ManualClock:
    """Implements `ports.Clock`; starts at a fixed instant and moves only when told."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        """The current (manual) time."""
        return self.ms

    def advance(self, *, ms: int = 0, s: float = 0) -> None:
        """Move forward."""
        self.ms += ms + int(s * 1000)
