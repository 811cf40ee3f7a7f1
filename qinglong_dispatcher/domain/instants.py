"""Instants as text: milliseconds since the epoch as RFC 3339 UTC, as the audit export, the
notifications and the window messages write them (a conversion: no clock is read)."""

from __future__ import annotations

import datetime


def rfc3339(ms: int) -> str:
    """`ms` since the epoch as RFC 3339 UTC with milliseconds (`2026-12-06T13:26:26.000Z`)."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
