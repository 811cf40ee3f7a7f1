"""Instants and spans as text: milliseconds since the epoch as RFC 3339 UTC, as the audit
export, the notifications and the window messages write them, and a span as it is typed (a
conversion: no clock is read)."""

from __future__ import annotations

import datetime


def rfc3339(ms: int) -> str:
    """`ms` since the epoch as RFC 3339 UTC with milliseconds (`2026-12-06T13:26:26.000Z`)."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_UNITS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"))


def duration(ms: int) -> str:
    """A span as a DURATION is typed: the largest unit that counts it whole (`2d`, `90m`,
    `45s`), so what a command or a page shows can be typed back."""
    for size, unit in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s"
