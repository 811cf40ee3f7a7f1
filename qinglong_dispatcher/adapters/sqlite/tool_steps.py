"""Tool StepRuns on SQLite: creation, reads, the shared advance, and the settling transactions.

`advance` is the one place a StepRun moves: compare-and-set the StepRun, compare-and-set the
Run's version and event sequence, then append the RunEvent and the ledger line, in the
caller's transaction (steps 4–6 of the start barrier; also the settle after the adapter and
in a recovery resolution).
"""

from __future__ import annotations

import dataclasses
import sqlite3

from qinglong_dispatcher import tool_ports
from qinglong_dispatcher.adapters.sql import approvals, completions
from qinglong_dispatcher.adapters.sqlite import database, executions
from qinglong_dispatcher.adapters.sqlite import runs as run_rows
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import errors, fencing, records, runs, steps, tool_invocations
from qinglong_dispatcher.domain.records import Outcome

ACTIVE_RUN = frozenset({runs.RunStatus.QUEUED, runs.RunStatus.RUNNING})


class Refused(errors.StoreError):
    """Raised inside a transaction to roll it back whole; `reason` is a low-sensitivity code.

    The store turns it into a typed result; should it escape (a resolution racing a StepRun
    that moved), it is a non-retryable store error and nothing was written.
    """

    code = "step_run_refused"

    def __init__(self, reason: str) -> None:
        super().__init__(f"tool step refused: {reason}")
        self.reason = reason


def get(conn: sqlite3.Connection, step_run_id: str) -> steps.StepRun | None:
    """One StepRun, its binding re-checked."""
    row = conn.execute(Q["select_step_run"], {"step_run_id": step_run_id}).fetchone()
    return None if row is None else steps.StepRun.from_row(row)


def get_by_approval(conn: sqlite3.Connection, approval_request_id: str) -> steps.StepRun | None:
    """The StepRun bound to an approval request (at most one: a unique key)."""
    row = conn.execute(
        Q["select_step_run_by_approval"], {"approval_request_id": approval_request_id}
    ).fetchone()
    return None if row is None else steps.StepRun.from_row(row)


def get_mutation(conn: sqlite3.Connection, mutation_id: str) -> steps.Mutation | None:
    """One ledger line, its digest re-checked."""
    row = conn.execute(Q["select_step_run_mutation"], {"mutation_id": mutation_id}).fetchone()
    return None if row is None else steps.Mutation.from_row(row)


def mutations(conn: sqlite3.Connection, step_run_id: str) -> list[steps.Mutation]:
    """The ledger of one StepRun, oldest first."""
    rows = conn.execute(Q["select_step_run_mutations"], {"step_run_id": step_run_id})
    return [steps.Mutation.from_row(row) for row in rows]


def count_by_status(conn: sqlite3.Connection) -> dict[str, int]:
    """StepRuns per status, every status present."""
    counts = {status.value: 0 for status in steps.StepRunStatus}
    for row in conn.execute(Q["count_step_runs_by_status"]):
        counts[row["status"]] = row["n"]
    return counts


def create(conn: sqlite3.Connection, new: steps.NewStepRun, *, now_ms: int) -> steps.StepRun:
    """Insert a `ready`/`waiting_approval` StepRun under a queued or running Run of its project."""
    binding = new.binding
    run = run_rows.get_run(conn, binding.run_id)
    if run is None or run.project_id != binding.project_id:
        raise errors.StepRunRefused(
            f"run {binding.run_id} not found in project {binding.project_id}"
        )
    if run.status not in ACTIVE_RUN:
        raise errors.StepRunRefused(
            f"run {binding.run_id} is {run.status.value}: a step needs a queued or running run"
        )
    conn.execute(
        Q["insert_step_run"],
        {
            "step_run_id": binding.step_run_id,
            "run_id": binding.run_id,
            "project_id": binding.project_id,
            "tool_id": binding.tool_id,
            "tool_version": binding.tool_version,
            "definition_digest": binding.definition_digest,
            "action_type": binding.action_type,
            "action_ref": binding.action_ref,
            "action_digest": binding.action_digest,
            "approval_request_id": binding.approval_request_id,
            "binding_digest": binding.digest,
            "status": new.status.value,
            "now_ms": now_ms,
        },
    )
    created = get(conn, binding.step_run_id)
    assert created is not None
    return created


def submit(
    conn: sqlite3.Connection,
    new: approval_records.NewApproval,
    step: steps.NewStepRun,
    *,
    approved_by: str,
    principal: approval_records.Principal,
    now_ms: int,
    max_attempts: int,
) -> approval_records.Consumed:
    """Plan + pending approval, the StepRun waiting for it, approve and consume: one transaction.

    A self-approval: refused whole when the principal may not self-approve.
    """
    q = database.SqliteQuery(conn)
    database.drive(approvals.create(q, new, principal=principal, now_ms=now_ms))
    create(conn, step, now_ms=now_ms)
    database.drive(
        approvals.approve(
            q, new.approval_request_id, decided_by=approved_by, principal=principal, now_ms=now_ms
        )
    )
    return database.drive(
        approvals.consume(
            q,
            new.approval_request_id,
            principal=principal,
            now_ms=now_ms,
            max_attempts=max_attempts,
        )
    )


def advance(
    conn: sqlite3.Connection,
    step: steps.StepRun,
    run: runs.Run,
    *,
    to_status: steps.StepRunStatus,
    mutation_id: str,
    reason_code: str,
    result_code: str | None,
    event_type: str,
    now_ms: int,
) -> steps.Mutation:
    """CAS the StepRun, CAS the Run, append RunEvent and ledger line; `Refused` if either moved."""
    draft = steps.Mutation(
        mutation_id=mutation_id,
        step_run_id=step.step_run_id,
        run_id=run.run_id,
        project_id=step.binding.project_id,
        from_status=step.status,
        to_status=to_status,
        from_version=step.version,
        to_version=step.version + 1,
        run_event_seq=run.event_seq + 1,
        run_version=run.version + 1,
        reason_code=reason_code,
    ).signed()
    moved = conn.execute(
        Q["advance_step_run"],
        {
            "step_run_id": step.step_run_id,
            "from_status": step.status.value,
            "from_version": step.version,
            "to_status": to_status.value,
            "to_version": draft.to_version,
            "result_code": result_code,
            "now_ms": now_ms,
        },
    ).fetchone()
    if moved is None:
        raise Refused("step_run_moved")
    sequenced = conn.execute(
        Q["advance_run_sequence"],
        {
            "run_id": run.run_id,
            "version": run.version,
            "event_seq": run.event_seq,
            "now_ms": now_ms,
        },
    ).fetchone()
    if sequenced is None or (sequenced["version"], sequenced["event_seq"]) != (
        draft.run_version,
        draft.run_event_seq,
    ):
        raise Refused("run_moved")
    conn.execute(
        Q["insert_run_event"],
        {
            "run_id": run.run_id,
            "seq": draft.run_event_seq,
            "event_type": event_type,
            "run_version": draft.run_version,
        },
    )
    committed = conn.execute(Q["insert_step_run_mutation"], draft.row()).fetchone()
    return dataclasses.replace(draft, committed_at_ms=committed["committed_at_ms"])


def settle(
    conn: sqlite3.Connection,
    dispatch: records.Dispatch,
    *,
    resolution: str,
    reason_code: str,
    now_ms: int,
) -> steps.StepRunStatus | None:
    """Move the dispatch's StepRun as its dispatch settles (see `steps.settle_target`).

    Returns the StepRun's status afterwards, or None when the dispatch has no StepRun.
    """
    step = get_by_approval(conn, dispatch.approval_request_id)
    if step is None:
        return None
    started = get_mutation(conn, tool_invocations.ids_for(dispatch.dispatch_id).mutation_id)
    started_here = started is not None and started.to_version == step.version
    target = steps.settle_target(step.status, resolution, started_here=started_here)
    if target is None:
        return step.status
    run = run_rows.get_run(conn, step.binding.run_id)
    if run is None:
        raise Refused("run_missing")
    advance(
        conn,
        step,
        run,
        to_status=target,
        mutation_id=tool_invocations.finish_mutation_id(dispatch.dispatch_id),
        reason_code=reason_code,
        result_code=reason_code,
        event_type=steps.RESULT_EVENT[target],
        now_ms=now_ms,
    )
    return target


def complete(
    conn: sqlite3.Connection, request: tool_ports.ToolStepCompletion
) -> tool_ports.ToolStepCompletionResult:
    """The StepRun's result and the execution's completion in this one transaction."""
    dispatch, identity = request.dispatch, request.identity
    finish = tool_invocations.finish_mutation_id(dispatch.dispatch_id)
    if get_mutation(conn, finish) is None:
        step = get_by_approval(conn, dispatch.approval_request_id)
        if step is not None and request.step_run_id not in (None, step.step_run_id):
            raise Refused("step_run_mismatch")
        found = executions.read_row(conn, dispatch.dispatch_id)
        refusal = None if found is None else fencing.complete_refusal(found[0], identity)
        if found is None or refusal is not None:
            raise Refused(refusal or "not_found")
        settle(
            conn,
            dispatch,
            resolution=request.completion.value,
            reason_code=request.result_code,
            now_ms=request.now_ms,
        )
    done = database.drive(
        completions.complete(
            database.SqliteQuery(conn),
            identity,
            mutation_id=fencing.mutation_id(dispatch.dispatch_id, identity.attempt, "complete"),
            completion=request.completion,
            result_code=request.result_code,
            now_ms=request.now_ms,
        )
    )
    if done.outcome not in (Outcome.COMPLETED, Outcome.EXISTING):
        raise Refused(done.reason or "complete_refused")
    after = get_by_approval(conn, dispatch.approval_request_id)
    return tool_ports.ToolStepCompletionResult(
        outcome=tool_ports.ToolStepOutcome.COMPLETED
        if done.outcome is Outcome.COMPLETED
        else tool_ports.ToolStepOutcome.EXISTING,
        step_status=after.status if after else None,
    )
