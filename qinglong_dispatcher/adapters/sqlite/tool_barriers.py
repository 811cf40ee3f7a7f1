"""The tool execution start barrier on SQLite (ADR-0158 §2, §4): one BEGIN IMMEDIATE.

`prepare` runs on the one connection inside the store's BEGIN IMMEDIATE, in the fixed order
of ADR-0158 §2: (1) every start/replay identity, an exact replay returning `existing`;
(2) the Run and StepRun re-verified (the write lock is already ours); (3) audit event, Trace
anchor, Audit receipt; (4) StepRun → `running`; (5) Run version/event sequence; (6) RunEvent
and ledger line; (7) the immutable barrier. Any failure rolls every fact back.
"""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher import tool_ports
from qinglong_dispatcher.adapters.sqlite import executions, recovery, tool_steps
from qinglong_dispatcher.adapters.sqlite import runs as run_rows
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import errors, runs, steps, tool_barrier_checks, tool_start


def _one(rows: list[sqlite3.Row], what: str) -> sqlite3.Row | None:
    if len(rows) > 1:  # unique keys make this impossible unless the schema was tampered with
        raise errors.StoreCorrupted(f"{what} is ambiguous", code="barrier_ambiguous")
    return rows[0] if rows else None


def get_by_start_id(
    conn: sqlite3.Connection, start_id: str
) -> tool_barrier_checks.StoredBarrier | None:
    """The barrier of a start, every digest and mirror column re-checked."""
    rows = conn.execute(Q["select_barrier_by_start_id"], {"start_id": start_id}).fetchall()
    row = _one(rows, "tool start barrier")
    return None if row is None else tool_barrier_checks.verify_row(row)


def get_by_started_version(
    conn: sqlite3.Connection, run_id: str, step_run_id: str, started_version: int
) -> tool_barrier_checks.StoredBarrier | None:
    """The barrier that started this StepRun version, re-checked."""
    rows = conn.execute(
        Q["select_barrier_by_started_version"],
        {"run_id": run_id, "step_run_id": step_run_id, "started_version": started_version},
    ).fetchall()
    row = _one(rows, "tool start barrier")
    return None if row is None else tool_barrier_checks.verify_row(row)


def _replay(
    conn: sqlite3.Connection, command: tool_start.StartCommand
) -> tool_ports.StartBarrierResult | None:
    """Step 1: None when no identity of the command is taken yet."""
    step, evidence = command.step_run, command.evidence
    rows = conn.execute(
        Q["select_barrier_identities"],
        {
            "start_id": command.start_id,
            "run_id": step.run_id,
            "step_run_id": step.step_run_id,
            "started_version": step.started_version,
            "mutation_id": command.mutation.mutation_id,
            "trace_id": evidence.trace_id,
            "audit_receipt_id": evidence.audit_receipt_id,
            "dispatch_id": command.approval.dispatch_id if command.approval else None,
        },
    ).fetchall()
    if not rows:
        return None
    if len(rows) == 1 and rows[0]["start_id"] == command.start_id:
        if rows[0]["command_digest"] != command.digest:
            return tool_ports.StartBarrierResult(
                outcome=tool_ports.StartOutcome.CONFLICT, reason="start_id_reused"
            )
        stored = get_by_start_id(conn, command.start_id)
        return tool_ports.StartBarrierResult(
            outcome=tool_ports.StartOutcome.EXISTING, barrier=stored
        )
    return tool_ports.StartBarrierResult(
        outcome=tool_ports.StartOutcome.CONFLICT, reason="identity_in_use"
    )


def verify_refusal(
    conn: sqlite3.Connection,
    command: tool_start.StartCommand,
    run: runs.Run | None,
    step: steps.StepRun | None,
) -> str | None:
    """Step 2's checks on rows the transaction holds; the same rules as PostgreSQL's."""
    wanted = command.step_run
    if run is None or run.project_id != command.project_id:
        return "run_missing"
    if run.status not in tool_steps.ACTIVE_RUN:
        return "run_not_active"
    if step is None:
        return "step_run_missing"
    binding = step.binding
    if (binding.run_id, binding.project_id) != (run.run_id, command.project_id):
        return "step_run_not_in_run"
    if step.status.value != wanted.expected_status:
        return "step_run_status_moved"
    if step.version != wanted.expected_version:
        return "step_run_version_moved"
    if (binding.tool_id, binding.tool_version, binding.definition_digest) != (
        command.tool.tool_id,
        command.tool.tool_version,
        command.tool.definition_digest,
    ):
        return "definition_mismatch"
    if tool_start.registry_mismatch(command) is not None:
        return "definition_drift"
    if (binding.action_type, binding.action_ref, binding.action_digest) != (
        command.action.action_type,
        command.action.action_ref,
        command.action.action_digest,
    ):
        return "action_mismatch"
    approval = command.approval
    if approval is None:
        return None
    if binding.approval_request_id != approval.approval_request_id:
        return "approval_mismatch"
    found = executions.read_row(conn, approval.dispatch_id)
    dispatch = None if found is None else found[1]
    if dispatch is None or (
        dispatch.approval_request_id,
        dispatch.action_digest,
        dispatch.project_id,
        dispatch.action_type,
    ) != (
        approval.approval_request_id,
        approval.action_digest,
        command.project_id,
        tool_start.TOOL_INVOKE,
    ):
        return "dispatch_mismatch"
    return None


def prepare(
    conn: sqlite3.Connection, command: tool_start.StartCommand
) -> tool_ports.StartBarrierResult:
    """The seven steps of ADR-0158 §2 in the caller's BEGIN IMMEDIATE transaction."""
    replay = _replay(conn, command)  # 1
    if replay is not None:
        return replay
    wanted, evidence = command.step_run, command.evidence
    run = run_rows.get_run(conn, wanted.run_id)  # 2
    step = tool_steps.get(conn, wanted.step_run_id)
    refusal = verify_refusal(conn, command, run, step)
    if refusal is not None:
        return tool_ports.StartBarrierResult(
            outcome=tool_ports.StartOutcome.CONFLICT, reason=refusal
        )
    assert run is not None
    assert step is not None
    now_ms = int(conn.execute(Q["database_now"]).fetchone()["now_ms"])
    audit = conn.execute(  # 3
        Q["insert_tool_audit_event"],
        {
            "kind": evidence.audit_kind,
            "actor": evidence.audit_actor,
            "principal": recovery.os_principal(),
            "project_id": command.project_id,
            "subject_id": wanted.step_run_id,
            "detail_code": evidence.audit_detail,
        },
    ).fetchone()
    command_digest = command.digest
    trace = tool_start.trace_digest(
        trace_id=evidence.trace_id,
        project_id=command.project_id,
        run_id=wanted.run_id,
        step_run_id=wanted.step_run_id,
        start_id=command.start_id,
        command_digest=command_digest,
    )
    conn.execute(
        Q["insert_trace_anchor"],
        {
            "trace_id": evidence.trace_id,
            "project_id": command.project_id,
            "run_id": wanted.run_id,
            "step_run_id": wanted.step_run_id,
            "start_id": command.start_id,
            "command_digest": command_digest,
            "trace_digest": trace,
        },
    )
    receipt = tool_start.receipt_digest(
        receipt_id=evidence.audit_receipt_id,
        audit_event_id=audit["event_id"],
        kind=audit["kind"],
        actor=audit["actor"],
        principal=audit["principal"],
        project_id=audit["project_id"],
        subject_id=audit["subject_id"],
        detail_code=audit["detail_code"],
        trace_id=evidence.trace_id,
        trace_digest=trace,
        start_id=command.start_id,
    )
    conn.execute(
        Q["insert_audit_receipt"],
        {
            "receipt_id": evidence.audit_receipt_id,
            "audit_event_id": audit["event_id"],
            "trace_id": evidence.trace_id,
            "start_id": command.start_id,
            "receipt_digest": receipt,
        },
    )
    mutation = tool_steps.advance(  # 4, 5, 6
        conn,
        step,
        run,
        to_status=steps.StepRunStatus.RUNNING,
        mutation_id=command.mutation.mutation_id,
        reason_code="start_authorised",
        result_code=None,
        event_type=steps.EVENT_STARTED,
        now_ms=now_ms,
    )
    assert mutation.committed_at_ms is not None
    stored = tool_barrier_checks.build(
        command,
        tool_barrier_checks.Evidence(
            mutation=mutation,
            started_step_run_digest=steps.started_digest(
                step.binding_digest,
                step_run_id=wanted.step_run_id,
                run_id=wanted.run_id,
                project_id=command.project_id,
                started_version=wanted.started_version,
            ),
            trace_digest=trace,
            audit_event_id=audit["event_id"],
            audit_receipt_digest=receipt,
            run_event_seq=mutation.run_event_seq,
            run_version=mutation.run_version,
            committed_at_ms=mutation.committed_at_ms,
        ),
    )
    conn.execute(  # 7
        Q["insert_barrier"],
        {
            **stored.barrier.columns(),
            "barrier_json": stored.barrier_json,
            "barrier_digest": stored.barrier_digest,
        },
    )
    return tool_ports.StartBarrierResult(outcome=tool_ports.StartOutcome.CREATED, barrier=stored)
