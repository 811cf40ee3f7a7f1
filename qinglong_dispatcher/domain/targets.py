"""Targets: what a dispatch changes, one change at a time, and why a dispatch waits for one.

A plan may name a target (its model's `TARGET_MEMBER`, `plans.plan_target`); the database
copies it into the dispatch and its execution and lets at most one execution per target be
past its claim (`leased` or `executing`). An `executing` row whose lease expired is
`recovery_required` (derived, `states.effective_status`): its effect's outcome is unknown, so
its target is **held** until the row is settled; a live one keeps its target **busy**. A
dispatch behind either is `waiting_for_target`: still `pending` (or `retry_wait`), never
claimed, its attempts untouched. The wait is derived like `recovery_required`, never stored:
it begins and ends with another row's changes, which this row's must not have to follow.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.states import ExecutionStatus

WAITING_FOR_TARGET: Final = "waiting_for_target"
"""How `dispatch show`, `dispatch list` and the API name the wait."""

_WAITS: Final = frozenset({ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT})
"""The stored statuses a dispatch waits for its target in (claimable but for the target)."""

HOLD: Final = "hold"
"""The default rule: a target whose last effect's outcome is unknown is held until it is
settled."""
PROCEED: Final = "proceed"
"""A policy's other rule: the next dispatch on the target may start once the row is
`recovery_required` (never while its lease is live: decision 0051)."""

T = TypeVar("T")


class TargetWaitKind(enum.Enum):
    """Why a target keeps a dispatch waiting."""

    BUSY = "busy_by"
    """Another dispatch on the target is past its claim, its lease live."""
    HELD = "held_by"
    """Another dispatch's effect on the target has an unknown outcome (`recovery_required`):
    nothing else starts on the target until an operator or evidence settles it."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TargetWait:
    """A dispatch waiting for its target, and the dispatch that has the target."""

    target: str
    kind: TargetWaitKind
    by_dispatch_id: str

    @classmethod
    def from_row(cls, row: records.RowLike, *, settling_ms: int) -> TargetWait | None:
        """The wait of a view row (`target`, `status` and the `target_holder_*` columns of the
        one execution past its claim on the same target), decided at the settling instant;
        None when the row does not wait for its target."""
        holder = row["target_holder_id"]
        if holder is None or row["target"] is None:
            return None
        if ExecutionStatus(row["status"]) not in _WAITS:
            return None
        holder_status = states.effective_status(
            ExecutionStatus(row["target_holder_status"]),
            row["target_holder_lease_expires_at_ms"],
            settling_ms,
        )
        held = holder_status is states.EffectiveStatus.RECOVERY_REQUIRED
        return cls(
            target=row["target"],
            kind=TargetWaitKind.HELD if held else TargetWaitKind.BUSY,
            by_dispatch_id=holder,
        )

    def __str__(self) -> str:
        return f"{WAITING_FOR_TARGET} {self.kind.value} {self.by_dispatch_id}"

    def as_dict(self) -> dict[str, object]:
        """JSON members: `{"target", "held_by" | "busy_by": dispatch id}`."""
        return {"target": self.target, self.kind.value: self.by_dispatch_id}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HolderCounts:
    """The targets some dispatch has past its claim (one each: the partial unique index), split
    as a waiting dispatch would see them: held (its holder `recovery_required`) or busy."""

    held: int
    busy: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HeldTarget:
    """A held target that others wait on: its `recovery_required` holder, since when the
    holder's lease expired, and how many dispatches wait behind it."""

    target: str
    holder_dispatch_id: str
    action_type: str
    project_id: str
    since_ms: int
    waiting: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> HeldTarget:
        """From a `held_targets` row."""
        return cls(
            target=row["target"],
            holder_dispatch_id=row["dispatch_id"],
            action_type=row["action_type"],
            project_id=row["project_id"],
            since_ms=int(row["lease_expires_at_ms"]),
            waiting=int(row["waiting"]),
        )


def first_per_target(page: Sequence[T], target: Callable[[T], str | None]) -> list[T]:
    """The page without every row whose target an earlier row of it has: one lease per target
    in one claim (the database would refuse the second and undo the whole page). The rows left
    out stay due, and the next observation finds their target busy."""
    seen: set[str] = set()
    kept: list[T] = []
    for item in page:
        name = target(item)
        if name is not None:
            if name in seen:
                continue
            seen.add(name)
        kept.append(item)
    return kept
