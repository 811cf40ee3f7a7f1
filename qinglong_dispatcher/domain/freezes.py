"""Change freezes (docs/operations.md#freezes-and-holds): a freeze holds the dispatches of its
scope from a time until a time, for a reason. The database decides who writes, ends and lifts
them (migration 0035); this module only checks what is asked before it is written."""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher.domain import approval_policies, errors, plans, records

MAX_REASON = 200
"""The longest reason the tables accept."""


def check_reason(reason: str) -> str:
    """`reason` if the tables accept it (1…200 characters, printable), else `InvalidInput`."""
    if not 1 <= len(reason) <= MAX_REASON or not reason.isprintable():
        raise errors.InvalidInput(f"a reason is 1…{MAX_REASON} printable characters")
    return reason


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewFreeze:
    """A freeze as asked; `check` refuses what the database would. A scope left None matches
    every dispatch (all three None: everything is frozen)."""

    action_type: str | None = None
    project_id: str | None = None
    target_prefix: str | None = None
    from_ms: int
    until_ms: int
    reason: str

    def check(self) -> NewFreeze:
        """`self` when every value is one the database accepts, else `InvalidInput`."""
        if self.action_type is not None:
            plans.require_identifier("action type", self.action_type)
        if self.project_id is not None:
            plans.require_identifier("project", self.project_id)
        if self.target_prefix is not None:
            approval_policies.check_target_prefix(self.target_prefix)
        if self.until_ms <= self.from_ms:
            raise errors.InvalidInput("a freeze ends after it begins (--until after --from)")
        check_reason(self.reason)
        return self


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Freeze:
    """One stored freeze."""

    freeze_id: int
    action_type: str | None
    project_id: str | None
    target_prefix: str | None
    from_ms: int
    until_ms: int
    reason: str
    created_by: str
    created_at_ms: int
    ended_by: str | None
    ended_at_ms: int | None

    def in_force(self, now_ms: int) -> bool:
        """Whether it holds its dispatches at `now_ms`."""
        return self.ended_at_ms is None and self.from_ms <= now_ms < self.until_ms

    def scope(self) -> str:
        """The scope in one phrase: `all`, or the set parts."""
        parts = [
            f"{name}={value}"
            for name, value in (
                ("action", self.action_type),
                ("project", self.project_id),
                ("target-prefix", self.target_prefix),
            )
            if value is not None
        ]
        return " ".join(parts) or "all"

    def as_dict(self) -> dict[str, object]:
        """The JSON shape of `freeze … --json` and the API."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FrozenDispatch:
    """A waiting dispatch a freeze in force holds now (the least freeze id of those that do,
    as `frozen_by` names it), and since when: the later of the freeze's start and the
    dispatch's creation."""

    dispatch_id: str
    action_type: str
    project_id: str
    target: str | None
    requested_by: str
    freeze_id: int
    reason: str
    until_ms: int
    since_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> FrozenDispatch:
        """From a `frozen_dispatches` row."""
        return cls(
            dispatch_id=row["dispatch_id"],
            action_type=row["action_type"],
            project_id=row["project_id"],
            target=row["target"],
            requested_by=row["requested_principal"],
            freeze_id=int(row["freeze_id"]),
            reason=row["reason"],
            until_ms=int(row["until_ms"]),
            since_ms=max(int(row["from_ms"]), int(row["created_at_ms"])),
        )
