"""The tool execution start barrier (docs/decisions/0019, 0054): one transaction, every fact
or none.

`prepare` runs in the fixed order of docs/decisions/0054: (1) Run and StepRun locked, in the
order every transaction that moves a StepRun keeps; (2) every start/replay identity, an exact
replay returning `existing`; (3) the rows re-verified (`tool_barrier_checks.start_refusal`);
(4) audit event, Trace anchor, Audit receipt; (5) StepRun → `running`; (6) Run version/event
sequence; (7) RunEvent and ledger line; (8) the immutable barrier. Any failure rolls every fact
back. The locks come first, so a rival barrier of the same StepRun waits for this one and then
reads what it committed: the runner needs no stricter isolation than its default (SQLite's
BEGIN IMMEDIATE, PostgreSQL's READ COMMITTED).

Its named statements are in `queries/` with the StepRuns' (`steps.STATEMENTS`).
"""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import steps as tool_steps
from qinglong_dispatcher.domain import errors, records, runs
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps
from qinglong_dispatcher.ports import transactions as tx

TIMEOUTS = {"statement_timeout": "5s", "lock_timeout": "2s", "idle_timeout": "10s"}
"""Fixed bounds of the barrier transaction (docs/decisions/0054): PostgreSQL sets them LOCAL to it;
SQLite's statement only selects them back (the one connection's busy timeout bounds it)."""


def _one(found: list[Any], what: str) -> Any:
    if len(found) > 1:  # unique keys make this impossible unless the schema was tampered with
        raise errors.StoreCorrupted(f"{what} is ambiguous", code="barrier_ambiguous")
    return found[0] if found else None


async def get_by_start_id(q: tx.Query, start_id: str) -> tool_barrier_checks.StoredBarrier | None:
    """The barrier of a start, every digest and mirror column re-checked."""
    found = await q.all("select_barrier_by_start_id", {"start_id": start_id})
    row = _one(found, "tool start barrier")
    return None if row is None else tool_barrier_checks.verify_row(row)


async def get_by_started_version(
    q: tx.Query, run_id: str, step_run_id: str, started_version: int
) -> tool_barrier_checks.StoredBarrier | None:
    """The barrier that started this StepRun version, re-checked."""
    found = await q.all(
        "select_barrier_by_started_version",
        {"run_id": run_id, "step_run_id": step_run_id, "started_version": started_version},
    )
    row = _one(found, "tool start barrier")
    return None if row is None else tool_barrier_checks.verify_row(row)


async def _replay(
    q: tx.Query, command: tool_start.StartCommand, command_digest: str
) -> ports.StartBarrierResult | None:
    """Step 2: None when no identity of the command is taken yet."""
    step, evidence = command.step_run, command.evidence
    found = await q.all(
        "select_barrier_identities",
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
    )
    if not found:
        return None
    if len(found) == 1 and found[0]["start_id"] == command.start_id:
        if found[0]["command_digest"] != command_digest:
            return ports.StartBarrierResult(
                outcome=ports.StartOutcome.CONFLICT, reason="start_id_reused"
            )
        stored = await get_by_start_id(q, command.start_id)
        return ports.StartBarrierResult(outcome=ports.StartOutcome.EXISTING, barrier=stored)
    return ports.StartBarrierResult(outcome=ports.StartOutcome.CONFLICT, reason="identity_in_use")


async def _locked_rows(
    q: tx.Query, command: tool_start.StartCommand
) -> tuple[runs.Run | None, steps.StepRun | None]:
    """Step 1: Run, then StepRun, locked (the order `tool_steps` keeps)."""
    wanted = command.step_run
    run = await tool_steps.lock_run(q, wanted.run_id)
    step = await tool_steps.get(q, wanted.step_run_id, lock=True)
    return run, step


async def _dispatch(
    q: tx.Query, shared: tx.Shared, command: tool_start.StartCommand
) -> records.Dispatch | None:
    """The dispatch the command's approval names (its fields are immutable: no lock)."""
    if command.approval is None:
        return None
    found = await shared.read_row(q, command.approval.dispatch_id)
    return None if found is None else found[1]


async def _evidence(
    q: tx.Query, command: tool_start.StartCommand, command_digest: str, *, principal: str | None
) -> tuple[Any, str, str]:
    """Step 4: the audit event, the Trace anchor and the Audit receipt; their ids and digests."""
    wanted, evidence = command.step_run, command.evidence
    audit = await q.one(  # PostgreSQL writes its session's login and ignores `principal`
        "insert_tool_audit_event",
        {
            "kind": evidence.audit_kind,
            "actor": evidence.audit_actor,
            "principal": principal,
            "project_id": command.project_id,
            "subject_id": wanted.step_run_id,
            "detail_code": evidence.audit_detail,
        },
    )
    trace = tool_start.trace_digest(
        trace_id=evidence.trace_id,
        project_id=command.project_id,
        run_id=wanted.run_id,
        step_run_id=wanted.step_run_id,
        start_id=command.start_id,
        command_digest=command_digest,
    )
    await q.run(
        "insert_trace_anchor",
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
    await q.run(
        "insert_audit_receipt",
        {
            "receipt_id": evidence.audit_receipt_id,
            "audit_event_id": audit["event_id"],
            "trace_id": evidence.trace_id,
            "start_id": command.start_id,
            "receipt_digest": receipt,
        },
    )
    return audit["event_id"], trace, receipt


async def prepare(
    q: tx.Query, shared: tx.Shared, command: tool_start.StartCommand, *, principal: str | None
) -> ports.StartBarrierResult:
    """The eight steps of docs/decisions/0054 in the caller's transaction.

    `principal` names the audit event on SQLite (the OS user); PostgreSQL's statement writes
    `session_user` instead.
    """
    bounds = await q.one("barrier_timeouts", TIMEOUTS)  # and the database's clock
    run, step = await _locked_rows(q, command)  # 1
    # The command's canonical JSON hashed once: the replay check, the Trace anchor and the
    # barrier all bind this one digest (each hash is a canonical dump of the whole command).
    command_digest = command.digest
    replay = await _replay(q, command, command_digest)  # 2
    if replay is not None:
        return replay
    dispatch = await _dispatch(q, shared, command)
    refusal = tool_barrier_checks.start_refusal(command, run, step, dispatch)  # 3
    if refusal is not None:
        return ports.StartBarrierResult(outcome=ports.StartOutcome.CONFLICT, reason=refusal)
    wanted = command.step_run
    assert run is not None
    assert step is not None
    now_ms = int(bounds["now_ms"])
    audit_event_id, trace, receipt = await _evidence(  # 4
        q, command, command_digest, principal=principal
    )
    mutation = await tool_steps.advance(  # 5, 6, 7
        q,
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
            command_digest=command_digest,
            mutation=mutation,
            started_step_run_digest=steps.started_digest(
                step.binding_digest,
                step_run_id=wanted.step_run_id,
                run_id=wanted.run_id,
                project_id=command.project_id,
                started_version=wanted.started_version,
            ),
            trace_digest=trace,
            audit_event_id=audit_event_id,
            audit_receipt_digest=receipt,
            run_event_seq=mutation.run_event_seq,
            run_version=mutation.run_version,
            committed_at_ms=mutation.committed_at_ms,
        ),
    )
    await q.run(  # 8
        "insert_barrier",
        {
            **stored.barrier.columns(),
            "barrier_json": stored.barrier_json,
            "barrier_digest": stored.barrier_digest,
        },
    )
    return ports.StartBarrierResult(outcome=ports.StartOutcome.CREATED, barrier=stored)
