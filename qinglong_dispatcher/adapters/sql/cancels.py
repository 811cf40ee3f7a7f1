"""`cancel`: an operator ends a waiting dispatch under the claim's fence.

The row is locked and read, the decision made on what was read, and the update is conditioned
on that same version and a waiting status, so a claim racing it either committed first (the
cancel sees `leased` and is refused) or waits for this transaction and then skips the row.
The principal beside the operator's name is the authenticated one: the OS user on SQLite,
the acting principal on PostgreSQL (the login, or the principal role the API became), where
the state-machine trigger also refuses a cancel unless that role is a member of the
installation's operator role, and unless this transaction wrote the cancel's audit row first.
An API cancel also writes its request's audit row.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import query, rows, tokens
from qinglong_dispatcher.domain import cancels, errors, principals, records
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.ports import action_tables


async def cancel(
    q: query.Query,
    request: cancels.Cancel,
    tables: Sequence[action_tables.ActionTables],
    *,
    principal: str | None,
    now_ms: int,
    context: principals.RequestContext | None = None,
) -> records.Transition:
    """Cancel the row if it waits; the first committed writer (claim or cancel) wins."""
    found = await rows.read_row(q, request.dispatch_id, lock=True)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=request.dispatch_id, reason="not_found"
        )
    execution, dispatch = found
    refused = cancels.refusal(execution)
    if refused is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT,
            dispatch_id=request.dispatch_id,
            status=execution.status,
            reason=refused,
        )
    mutation = cancels.mutation_id(request.dispatch_id)
    # The audit row first: the database cancels only a row whose audit row, naming the
    # acting principal and this change, this transaction has already written.
    await q.run(
        "insert_audit_event",
        {
            "kind": cancels.AUDIT_CANCELLED,
            "actor": request.operator,
            "principal": principal,
            "project_id": execution.project_id,
            "subject_id": request.dispatch_id,
            "detail_code": f"{execution.status.value}:{request.reason_code}"[:128],
            "comment": None,
        },
    )
    cancelled = await rows.fenced_update(
        q,
        "cancel_row",
        {
            "dispatch_id": request.dispatch_id,
            "version": execution.version,
            "mutation_id": mutation,
            "result_code": request.reason_code,
            "now_ms": now_ms,
        },
        dispatch_id=request.dispatch_id,
        outcome=Outcome.COMPLETED,
        status=ExecutionStatus.CANCELLED,
    )
    if cancelled.outcome is Outcome.CONFLICT:
        # Under the row lock the refusal above already saw what the update repeats: a miss
        # is a broken invariant, and raising undoes the audit row with it.
        raise errors.StoreError("the cancel's update matched no row", code="raced")
    for own in tables:  # the actions' rows follow their dispatch (a StepRun)
        await own.settle(
            q,
            dispatch,
            resolution=cancels.STEP_RUN_RESOLUTION,
            reason_code=f"cancelled:{request.reason_code}"[:128],
            now_ms=now_ms,
        )
    await tokens.record_request(
        q,
        context,
        principal=principal,
        operation="cancel",
        actor=request.operator,
        project_id=execution.project_id,
        subject_id=request.dispatch_id,
        detail_code=request.reason_code,
    )
    return cancelled
