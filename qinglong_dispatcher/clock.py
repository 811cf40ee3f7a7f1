"""The wall clock the daemon uses; tests inject their own `ports.Clock`."""

from __future__ import annotations

import time


class SystemClock:
    """Milliseconds since the epoch from the system wall clock."""

    def now_ms(self) -> int:
        """The current time in milliseconds."""
        return time.time_ns() // 1_000_000
