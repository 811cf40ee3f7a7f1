"""Why a waiting dispatch does not start yet, besides its target (`domain/targets.py`): its
execution window has not opened (`not_before T`), or a freeze covers it (`frozen_by F`).

Derived at read time from the execution's window and the freezes in force (migration 0035),
never stored, like the target's wait. A freeze is named before the window: lifting it is what
an operator can do now.
"""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher.domain import records
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
