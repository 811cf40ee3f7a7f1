"""The clock port: what every component reads the time through."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Milliseconds since the epoch; tests inject one they can move."""

    def now_ms(self) -> int:
        """The current time in milliseconds."""
        ...
