"""The execution row as transactions read it (the database writes its ledger lines itself)."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import records


async def read_row(
    q: query.Query, dispatch_id: str, *, lock: bool = False
) -> tuple[records.Execution, records.Dispatch] | None:
    """The execution and its dispatch, or None; `lock` holds the row until commit.

    A fencing decision that is followed by an update reads with `lock`, so the decision and
    the update see the same row (on SQLite the transaction's write lock already does that).
    """
    row = await q.one(
        "lock_execution" if lock else "select_execution", {"dispatch_id": dispatch_id}
    )
    if row is None:
        return None
    return records.Execution.from_row(row), records.Dispatch.from_joined_row(row)
