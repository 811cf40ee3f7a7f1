"""PostgreSQL's one-statement happy paths, each beside the shared transaction it shortcuts.

The shared transactions (`adapters/sql/executions.start`, `adapters/sql/submits.submit`, and
run.create's, whose statement `create_run_fast` its repository runs through
`PostgresStore.fast_statement`) cost a round trip per statement and one each for BEGIN and
COMMIT; on the happy path these write the same facts in one statement, its own implicit
transaction: a data-modifying CTE (docs/performance.md, "What makes it fast"), or for a submit,
which moves one request through three states, migration 0018's invoker function. Anything else —
a replay, a lost lease, a renewed version, a wrong binding, a collision — matches nothing here
and goes to the shared transaction, which decides.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.sql import approvals, executions
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import errors, ids, records


async def start_fast(
    database: db.Database, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult | None:
    """The barrier in one statement when everything matches; None: nothing was written, run
    the shared transaction."""
    params = executions.start_params(request, now_ms=now_ms, lease_ms=lease_ms)
    done = await database.statement("start_fast", params)
    if done is None:
        return None
    return executions.started(request, done, now_ms=now_ms)


async def submit_fast(
    database: db.Database,
    new: approval_records.NewApproval,
    *,
    approved_by: str,
    now_ms: int,
    max_attempts: int,
) -> approval_records.Consumed | None:
    """A submit of one plan in one round trip, the database judging the acting principal
    (`submit_one`); None: it declined and wrote nothing, run the shared transaction.

    Every refusal of the database's (a stored plan's unique key, separation of duties, the
    grants) is raised typed, as from the shared transaction. It is not fenced, so a lost
    connection is raised, never replayed.
    """
    if (
        new.target is not None
        or new.traceparent is not None
        or (new.not_before_ms is not None or new.window_for_ms is not None)
    ):
        # `submit_one` (migration 0018) writes no target, no traceparent and no narrowed
        # window: a plan with one takes the shared transaction, which does.
        return None
    dispatch_id = ids.new_dispatch_id(now_ms)
    params = {
        **approvals.plan_row(new, now_ms),
        **approvals.request_row(new, approval_records.DATABASE_PRINCIPAL, now_ms),
        "decided_by": approved_by,
        "dispatch_id": dispatch_id,
        "max_attempts": max_attempts,
    }
    try:
        await database.statement("submit_one", params, replay=False)
    except errors.StoreError as refused:
        if refused.code == "submit_declined":
            return None
        raise
    return approval_records.Consumed(
        approval_request_id=new.approval_request_id,
        dispatch_id=dispatch_id,
        action_ref=new.action_ref,
    )
