"""The `run.create` effect transaction on SQLite: Run, attempt, event, receipt, completion."""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import completions
from qinglong_dispatcher.adapters.sqlite import database, executions
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import fencing, runs, states
from qinglong_dispatcher.domain.records import Outcome


def get_receipt(conn: sqlite3.Connection, dispatch_id: str) -> runs.RunReceipt | None:
    """The receipt of a dispatch."""
    row = conn.execute(Q["select_receipt"], {"dispatch_id": dispatch_id}).fetchone()
    return None if row is None else runs.RunReceipt.from_row(row)


def get_run(conn: sqlite3.Connection, run_id: str) -> runs.Run | None:
    """One Run by id."""
    row = conn.execute(Q["select_run"], {"run_id": run_id}).fetchone()
    return None if row is None else runs.Run.from_row(row)


def get_run_by_key(
    conn: sqlite3.Connection, project_id: str, idempotency_key: str
) -> runs.Run | None:
    """The Run holding an idempotency key."""
    row = conn.execute(
        Q["select_run_by_key"], {"project_id": project_id, "idempotency_key": idempotency_key}
    ).fetchone()
    return None if row is None else runs.Run.from_row(row)


def _replay(
    conn: sqlite3.Connection, request: ports.RunCreateRequest, receipt: runs.RunReceipt
) -> ports.RunCreateResult:
    dispatch = request.dispatch
    run = get_run(conn, receipt.resource_id)
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


def _diagnose(
    conn: sqlite3.Connection, request: ports.RunCreateRequest
) -> ports.RunCreateResult | int:
    """Not the happy path: a replay, a fenced handler, a collision — or a renewed version,
    which may still write (the result is then the version the receipt binds)."""
    dispatch, identity = request.dispatch, request.identity
    receipt = get_receipt(conn, dispatch.dispatch_id)
    if receipt is not None:
        return _replay(conn, request, receipt)
    found = executions.read_row(conn, dispatch.dispatch_id)
    if found is None:
        return ports.RunCreateResult(outcome=ports.RunCreateOutcome.FENCED, reason="not_found")
    execution, _ = found
    refusal = fencing.complete_refusal(execution, identity)
    if refusal is not None or execution.project_id != dispatch.project_id:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.FENCED, reason=refusal or "project_mismatch"
        )
    if get_run_by_key(conn, dispatch.project_id, dispatch.dispatch_id) is not None:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.CONFLICT, reason="idempotency_key_collision"
        )
    return execution.version


def create_run(conn: sqlite3.Connection, request: ports.RunCreateRequest) -> ports.RunCreateResult:
    """Replay from the receipt, or re-verify the fence and write everything in this transaction."""
    dispatch, identity, run = request.dispatch, request.identity, request.run
    fence = conn.execute(
        Q["create_run_fast"],
        {
            "dispatch_id": dispatch.dispatch_id,
            "project_id": dispatch.project_id,
            "owner": identity.owner,
            "token": identity.token,
            "attempt": identity.attempt,
            "started_at_ms": identity.started_at_ms,
            "version": identity.version,
        },
    ).fetchone()
    if fence is not None:
        execution_version = identity.version  # the happy path: one read checked it all
    else:
        refused = _diagnose(conn, request)
        if isinstance(refused, ports.RunCreateResult):
            return refused
        execution_version = refused
    conn.execute(Q["insert_run"], runs.run_row(run))
    conn.execute(
        Q["insert_run_attempt"],
        {"run_id": run.run_id, "status": run.status.value, "created_at_ms": run.created_at_ms},
    )
    conn.execute(
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
        execution_version=execution_version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=request.now_ms,
    )
    conn.execute(Q["insert_receipt"], runs.receipt_row(receipt))
    done = database.drive(
        completions.complete_checked(
            database.SqliteQuery(conn),
            identity,
            mutation_id=request.mutation_id,
            completion=states.Completion.SUCCEEDED,
            result_code=runs.RESULT_CODE_RUN_CREATED,
            now_ms=request.now_ms,
        )
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
