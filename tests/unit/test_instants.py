"""Instants as RFC 3339 UTC text (what the audit export, the notifications and the window
messages print, read back by the audit export's `since`), spans as they are typed, and a
requester's narrowing in the words its approvers read."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import approval_policies, audit_export, instants, waits


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


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (2 * 86_400_000, "2d"),
        (90 * 60_000, "90m"),
        (3_600_000, "1h"),
        (45_000, "45s"),
        (1_500, "1s"),
    ],
)
def test_a_span_is_its_largest_whole_unit_and_parses_back(ms: int, text: str) -> None:
    assert instants.duration(ms) == text
    if ms % 1000 == 0:  # a whole number of seconds types back to itself
        assert approval_policies.parse_duration(text, "span") == ms


@pytest.mark.parametrize(
    ("narrowing", "text"),
    [
        (waits.Narrowing(), None),
        (
            waits.Narrowing(not_before_ms=1_796_563_586_007, window_for_ms=7_200_000),
            "not before 2026-12-06T13:26:26.007Z, within 2h",
        ),
        (waits.Narrowing(not_before_ms=0), "not before 1970-01-01T00:00:00.000Z"),
        (waits.Narrowing(window_for_ms=1_800_000), "within 30m of its dispatch"),
    ],
)
def test_a_narrowing_reads_as_an_approver_reads_it(
    narrowing: waits.Narrowing, text: str | None
) -> None:
    assert narrowing.text() == text
