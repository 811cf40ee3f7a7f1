"""Instants as RFC 3339 UTC text: what the audit export, the notifications and the window
messages print, read back by the audit export's `since`."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import audit_export, instants


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_796_563_586_007, "2026-12-06T13:26:26.007Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_an_instant_is_utc_with_milliseconds_and_reads_back(ms: int, text: str) -> None:
    assert instants.rfc3339(ms) == text
    assert audit_export.parse_since(text) == ms
