"""The execution row as transactions read and update it (the database writes its ledger lines)."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import records, states


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


async def fenced_update(
    q: query.Query,
    statement: str,
    params: query.Params,
    *,
    dispatch_id: str,
    outcome: records.Outcome,
    status: states.ExecutionStatus,
) -> records.Transition:
    """Run a fenced UPDATE … RETURNING version: the transition it made, or a `raced` conflict.

    The caller decided on the row it read locked; the update repeats those conditions, so a
    miss means the row changed in between (a version only grows: it cannot match again).
    """
    done = await q.one(statement, params)
    if done is None:
        return records.Transition(
            outcome=records.Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced"
        )
    return records.Transition(
        outcome=outcome, dispatch_id=dispatch_id, status=status, version=done["version"]
    )
