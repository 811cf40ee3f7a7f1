"""Retention of finished dispatch trees and audit records: durations, cutoffs and counts.

A dispatch tree is the dispatch, its execution, ledger events, receipt, resolution and
observation, its consumed approval and (when no other request names it) its plan. Only a
tree whose execution is terminal is ever pruned; `recovery_required` is `executing` with an
expired lease, never terminal, so it is never pruned.
"""

from __future__ import annotations

import dataclasses
import re

from qinglong_dispatcher.domain import errors, states

DAY_MS = 86_400_000

BATCH_LIMIT = 500
"""Dispatch trees (and, separately, audit records) per prune transaction: short enough that
the edge daemon's one connection is never held long."""

MAX_BATCHES_PER_PASS = 200
"""Batches of one daemon pass (100,000 trees): a backlog after an upgrade drains over a few
passes instead of holding the reconcile loop for minutes."""

VACUUM_PAGES = 4096
"""Free pages handed back to the file system per daemon pass (16 MiB of 4 KiB pages)."""

TERMINAL_STATUSES = tuple(sorted(status.value for status in states.TERMINAL))
"""The terminal execution statuses, as the prune statements and triggers spell them."""

_DURATION = re.compile(r"(\d{1,9})([dhm])")
_UNIT_MS = {"d": DAY_MS, "h": 3_600_000, "m": 60_000}


def parse_duration_ms(text: str) -> int:
    """`7d`, `12h` or `30m` in milliseconds; anything else (zero included) is InvalidInput."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise errors.InvalidInput(
            f"a duration is a whole number of days, hours or minutes: 7d, 12h or 30m (got {text!r})"
        )
    value = int(match.group(1))
    if value == 0:
        raise errors.InvalidInput(f"a duration must be more than zero (got {text!r})")
    return value * _UNIT_MS[match.group(2)]


def days_ms(days: float) -> int:
    """A retention in days, in whole milliseconds."""
    return round(days * DAY_MS)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cutoffs:
    """Rows older than these instants may go: trees by the time their execution became
    terminal (the injectable clock wrote it), audit records by their commit time (the
    database clock wrote it)."""

    dispatch_before_ms: int
    audit_before_ms: int

    @classmethod
    def at(cls, now_ms: int, *, retention_ms: int, audit_retention_ms: int) -> Cutoffs:
        """The cutoffs of a pass run at `now_ms`."""
        if retention_ms <= 0 or audit_retention_ms <= 0:
            raise errors.InvalidInput("a retention must be more than zero")
        return cls(
            dispatch_before_ms=now_ms - retention_ms,
            audit_before_ms=now_ms - audit_retention_ms,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PruneCounts:
    """What one batch (or a whole pass) removed, or with `dry_run` would remove."""

    dispatches: int = 0
    audit_events: int = 0
    notification_events: int = 0
    notification_deliveries: int = 0
    """The deliveries that went with the events (each event's, to each subscription)."""

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(
            dispatches=self.dispatches + other.dispatches,
            audit_events=self.audit_events + other.audit_events,
            notification_events=self.notification_events + other.notification_events,
            notification_deliveries=(self.notification_deliveries + other.notification_deliveries),
        )

    @property
    def empty(self) -> bool:
        """Nothing (more) to prune."""
        return self.dispatches == 0 and self.audit_events == 0 and self.notification_events == 0

    def short_of(self, limit: int) -> bool:
        """Whether every kind came back below a batch's `limit`: nothing is left to prune."""
        return max(self.dispatches, self.audit_events, self.notification_events) < limit
