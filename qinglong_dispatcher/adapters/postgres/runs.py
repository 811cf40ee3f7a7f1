"""The `run.create` effect transaction on PostgreSQL: Run, attempt, event, receipt, completion."""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import executions
from qinglong_dispatcher.adapters.postgres.queries import Q
from qinglong_dispatcher.adapters.sql import completions
from qinglong_dispatcher.domain import fencing, runs, states
from qinglong_dispatcher.domain.records import Outcome


async def get_receipt(conn: db.Connection, dispatch_id: str) -> runs.RunReceipt | None:
    """The receipt of a dispatch."""
    row = await db.fetchrow(conn, Q["select_receipt"], {"dispatch_id": dispatch_id})
    return None if row is None else runs.RunReceipt.from_row(row)


async def get_run(conn: db.Connection, run_id: str) -> runs.Run | None:
    """One Run by id."""
    row = await db.fetchrow(conn, Q["select_run"], {"run_id": run_id})
    return None if row is None else runs.Run.from_row(row)


async def get_run_by_key(
    conn: db.Connection, project_id: str, idempotency_key: str
) -> runs.Run | None:
    """The Run holding an idempotency key."""
    row = await db.fetchrow(
        conn,
        Q["select_run_by_key"],
        {"project_id": project_id, "idempotency_key": idempotency_key},
    )
    return None if row is None else runs.Run.from_row(row)


async def _replay(
    conn: db.Connection, request: ports.RunCreateRequest, receipt: runs.RunReceipt
) -> ports.RunCreateResult:
    dispatch = request.dispatch
    run = await get_run(conn, receipt.resource_id)
    mismatch = runs.receipt_mismatch(
        receipt,
        run,
        approval_request_id=dispatch.approval_request_id,
        project_id=dispatch.project_id,
        action_digest=dispatch.action_digest,
        attempt=receipt.execution_attempt,
        started_at_ms=receipt.started_at_ms,
    )
    if mismatch is not None:
        return ports.RunCreateResult(outcome=ports.RunCreateOutcome.CONFLICT, reason=mismatch)
    return ports.RunCreateResult(outcome=ports.RunCreateOutcome.EXISTING, run=run, receipt=receipt)


async def create_run_fast(
    database: db.Database, request: ports.RunCreateRequest
) -> ports.RunCreateResult | None:
    """Everything in one statement when the fence holds at exactly the started version (no
    renew), no receipt and no Run holds the key; None sends the caller to `create_run`."""
    dispatch, identity, run = request.dispatch, request.identity, request.run
    receipt = runs.receipt_for(
        dispatch=dispatch,
        attempt=identity.attempt,
        execution_version=identity.version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=request.now_ms,
    )
    params = {
        **runs.run_row(run),
        "run_status": run.status.value,
        "run_version": run.version,
        "event_type": runs.RUN_CREATED_EVENT,
        **runs.receipt_row(receipt),
        "dispatch_id": dispatch.dispatch_id,
        "attempt": identity.attempt,
        "version": identity.version,
        "owner": identity.owner,
        "token": identity.token,
        "mutation_id": request.mutation_id,
        "now_ms": request.now_ms,
    }
    done = await database.statement(Q["create_run_fast"], params)
    if done is None:
        return None
    return ports.RunCreateResult(outcome=ports.RunCreateOutcome.CREATED, run=run, receipt=receipt)


async def create_run(conn: db.Connection, request: ports.RunCreateRequest) -> ports.RunCreateResult:
    """Replay from the receipt, or re-verify the fence and write everything in this transaction.

    The execution row is locked before anything is read: a second effect transaction of the
    same dispatch (a retry after a lost acknowledgement) then waits for the first and finds
    its receipt, instead of racing it into the unique idempotency key.
    """
    dispatch, identity, run = request.dispatch, request.identity, request.run
    found = await executions.read_row(conn, dispatch.dispatch_id, lock=True)
    receipt = await get_receipt(conn, dispatch.dispatch_id)
    if receipt is not None:
        return await _replay(conn, request, receipt)
    if found is None:
        return ports.RunCreateResult(outcome=ports.RunCreateOutcome.FENCED, reason="not_found")
    execution, _ = found
    refusal = fencing.complete_refusal(execution, identity)
    if refusal is not None or execution.project_id != dispatch.project_id:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.FENCED, reason=refusal or "project_mismatch"
        )
    if await get_run_by_key(conn, dispatch.project_id, dispatch.dispatch_id) is not None:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.CONFLICT, reason="idempotency_key_collision"
        )
    await db.execute(conn, Q["insert_run"], runs.run_row(run))
    await db.execute(
        conn,
        Q["insert_run_attempt"],
        {"run_id": run.run_id, "status": run.status.value, "created_at_ms": run.created_at_ms},
    )
    await db.execute(
        conn,
        Q["insert_run_event"],
        {
            "run_id": run.run_id,
            "seq": run.event_seq,
            "event_type": runs.RUN_CREATED_EVENT,
            "run_version": run.version,
        },
    )
    receipt = runs.receipt_for(
        dispatch=dispatch,
        attempt=identity.attempt,
        execution_version=execution.version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=request.now_ms,
    )
    await db.execute(conn, Q["insert_receipt"], runs.receipt_row(receipt))
    done = await completions.complete(
        db.PgQuery(conn),
        identity,
        mutation_id=request.mutation_id,
        completion=states.Completion.SUCCEEDED,
        result_code=runs.RESULT_CODE_RUN_CREATED,
        now_ms=request.now_ms,
    )
    if done.outcome is not Outcome.COMPLETED:
        # Roll the whole effect back: a Run must never commit without its completion fence.
        raise FencedEffect(done.reason or "complete_refused")
    return ports.RunCreateResult(outcome=ports.RunCreateOutcome.CREATED, run=run, receipt=receipt)


class FencedEffect(Exception):
    """Raised inside the transaction to roll it back when the completion is refused."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
