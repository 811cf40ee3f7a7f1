"""One ledger line as `dispatch show` shows it: a status change of the execution row, without
its lease token, read as an operator needs it (who made it, and the `recovery_required` line of
the row's mark)."""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EventView:
    """One ledger line without its lease token; `committed_at_ms` is the database's clock.

    `to_status` is `recovery_required` on the line of the row's mark: when a recovery pass
    first observed the expired lease, or a resolution settled it before any pass did
    (`noticed_by`). A line that settled a started row names its settler (`settled_by`, and
    `settled_principal`, the principal the database authenticated)."""

    version: int
    from_status: ExecutionStatus | None
    to_status: EffectiveStatus
    attempt: int
    lease_owner: str | None
    mutation_id: str | None
    result_code: str | None
    committed_at_ms: int
    settled_by: str | None = None
    settled_principal: str | None = None
    noticed_by: str | None = None

    @classmethod
    def from_row(cls, row: records.RowLike) -> EventView:
        """A `select_event_views` row."""
        before = row["from_status"]
        return cls(
            version=row["version"],
            from_status=ExecutionStatus(before) if before else None,
            to_status=EffectiveStatus(row["to_status"]),
            attempt=row["attempt"],
            lease_owner=row["lease_owner"],
            mutation_id=row["mutation_id"],
            result_code=row["result_code"],
            committed_at_ms=row["committed_at_ms"],
            settled_by=row["settled_by"],
            settled_principal=row["settled_principal"],
            noticed_by=row["noticed_by"],
        )

    @property
    def by(self) -> str | None:
        """Who made the change: the settling principal, else the lease owner (a daemon)."""
        return self.settled_principal or self.lease_owner

    def as_dict(self) -> dict[str, object]:
        """JSON members, statuses as text."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["from_status"] = None if self.from_status is None else self.from_status.value
        values["to_status"] = self.to_status.value
        return values
