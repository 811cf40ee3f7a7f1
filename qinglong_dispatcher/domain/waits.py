"""Why a waiting dispatch does not start yet, besides its target (`domain/targets.py`): its
execution window has not opened (`not_before T`), or a freeze covers it (`frozen_by F`).

Derived at read time from the execution's window and the freezes in force (migration 0035),
never stored, like the target's wait. A freeze is named before the window: lifting it is what
an operator can do now.
"""

from __future__ import annotations

import dataclasses
import datetime

from qinglong_dispatcher.domain import approval_policies, errors, instants, records
from qinglong_dispatcher.domain.states import ExecutionStatus

FROZEN_BY = "frozen_by"
NOT_BEFORE = "not_before"
WAITING = frozenset({ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """An execution's window (None: open on that side)."""

    not_before_ms: int | None
    not_after_ms: int | None

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {"not_before_ms": self.not_before_ms, "not_after_ms": self.not_after_ms}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Wait:
    """One reason a waiting row is not claimed: `frozen_by` a freeze, or `not_before` its
    window's start."""

    reason: str
    freeze_id: int | None = None
    not_before_ms: int | None = None

    @classmethod
    def from_row(cls, row: records.RowLike, *, now_ms: int) -> Wait | None:
        """The wait of a dispatch view row (`frozen_by`, `not_before_ms`), if it waits."""
        if ExecutionStatus(row["status"]) not in WAITING:
            return None
        if row["frozen_by"] is not None:
            return cls(reason=FROZEN_BY, freeze_id=int(row["frozen_by"]))
        not_before = row["not_before_ms"]
        if not_before is not None and not_before > now_ms:
            return cls(reason=NOT_BEFORE, not_before_ms=int(not_before))
        return None

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {
            "reason": self.reason,
            "freeze_id": self.freeze_id,
            "not_before_ms": self.not_before_ms,
        }


def window_of(row: records.RowLike) -> Window | None:
    """The window of a dispatch view row, if it has one."""
    if row["not_before_ms"] is None and row["not_after_ms"] is None:
        return None
    return Window(not_before_ms=row["not_before_ms"], not_after_ms=row["not_after_ms"])


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Narrowing:
    """The requester's narrowing of its dispatch's window (migration 0040): start no earlier
    than `not_before_ms`, and within `window_for_ms` of it (of the moment the dispatch is
    written, without one). The database intersects it with the policy's window: it only
    narrows, never widens."""

    not_before_ms: int | None = None
    window_for_ms: int | None = None

    def check(self, *, now_ms: int) -> Narrowing:
        """Itself; `WindowEmpty` if it ended already (the database refuses the same, and one
        that ends before its policy's delay)."""
        if self.window_for_ms is not None:
            start = now_ms if self.not_before_ms is None else self.not_before_ms
            if start + self.window_for_ms <= now_ms:
                raise errors.WindowEmpty(
                    "the requested window ends before it can start: it closed at "
                    f"{instants.rfc3339(start + self.window_for_ms)}"
                )
        return self

    def text(self) -> str | None:
        """In words, as an approver reads it (`not before 2026-12-24T02:00:00.000Z, within
        2h`; `within 2h of its dispatch`); None when it narrows nothing."""
        within = None if self.window_for_ms is None else instants.duration(self.window_for_ms)
        if self.not_before_ms is None:
            return None if within is None else f"within {within} of its dispatch"
        start = f"not before {instants.rfc3339(self.not_before_ms)}"
        return start if within is None else f"{start}, within {within}"


def parse_moment(text: str, what: str, now_ms: int) -> int:
    """Milliseconds of an ISO 8601 time with a zone, or now plus a DURATION (`4h`, `2d`)."""
    try:
        return now_ms + approval_policies.parse_duration(text, what)
    except errors.InvalidInput:
        pass
    moment = parse_iso(text, what)
    if moment is None:
        raise errors.InvalidInput(f"{what}: not an ISO 8601 time nor a duration")
    return moment


def parse_iso(text: str, what: str) -> int | None:
    """Milliseconds of an ISO 8601 time with a zone; None when `text` is none; a time without
    its zone is refused, naming `what`."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        raise errors.InvalidInput(f"{what}: give the time zone (Z or ±HH:MM)")
    return int(moment.timestamp() * 1000)


def narrowing(
    not_before: str | None, window_for: str | None, *, now_ms: int, names: tuple[str, str]
) -> Narrowing:
    """The narrowing of a start (`parse_moment`) and a span (a DURATION), checked; `names`:
    how the caller calls them (`not-before`, `window-for` on the command line)."""
    return Narrowing(
        not_before_ms=None if not_before is None else parse_moment(not_before, names[0], now_ms),
        window_for_ms=None
        if window_for is None
        else approval_policies.parse_duration(window_for, names[1]),
    ).check(now_ms=now_ms)
