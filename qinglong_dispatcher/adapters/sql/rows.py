"""The execution row as transactions read it, and the ledger line every status change writes."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.states import ExecutionStatus


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


async def record_event(
    q: query.Query,
    *,
    dispatch_id: str,
    version: int,
    from_status: ExecutionStatus | None,
    to_status: ExecutionStatus,
    attempt: int,
    owner: str | None,
    token: str | None,
    mutation_id: str | None = None,
    result_code: str | None = None,
) -> None:
    """Append the status change to `execution_events` in the caller's transaction."""
    await q.run(
        "insert_event",
        {
            "dispatch_id": dispatch_id,
            "version": version,
            "from_status": from_status.value if from_status else None,
            "to_status": to_status.value,
            "attempt": attempt,
            "lease_owner": owner,
            "lease_token": token,
            "mutation_id": mutation_id,
            "result_code": result_code,
        },
    )
