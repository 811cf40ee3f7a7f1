"""The start barrier's rules: refusing a start, building the barrier, re-checking a stored one.

`start_refusal` decides step 3 of docs/decisions/0054 on the rows the barrier transaction holds,
the same function for both dialects. A stored barrier is trusted only after its JSON re-normalises
to the stored bytes, its digest matches, every mirror column equals its JSON member, and the
ledger line, RunEvent, Trace anchor, Audit event and receipt it references still hash to what
it recorded (docs/decisions/0019). Anything else is `StoreCorrupted`: a read fails closed, it never
returns a doubtful barrier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import errors, records, runs
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps

ACTIVE_RUN: Final = frozenset({runs.RunStatus.QUEUED, runs.RunStatus.RUNNING})
"""Run statuses under which a StepRun may be created or started."""

MUTATION_COLUMNS: Final = (
    "mutation_id",
    "step_run_id",
    "run_id",
    "project_id",
    "from_status",
    "to_status",
    "from_version",
    "to_version",
    "run_event_seq",
    "run_version",
    "reason_code",
    "mutation_digest",
    "committed_at_ms",
)
"""Ledger columns; the barrier read selects them prefixed `m_`."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StoredBarrier:
    """A barrier that passed every check, with the digest it is stored under."""

    barrier: tool_start.StartBarrier
    barrier_digest: str
    barrier_json: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """What the transaction wrote before the barrier, as the barrier must bind it."""

    command_digest: str
    """The command's digest, as its Trace anchor holds it."""
    mutation: steps.Mutation
    started_step_run_digest: str
    trace_digest: str
    audit_event_id: int
    audit_receipt_digest: str
    run_event_seq: int
    run_version: int
    committed_at_ms: int


def start_refusal(
    command: tool_start.StartCommand,
    run: runs.Run | None,
    step: steps.StepRun | None,
    dispatch: records.Dispatch | None,
) -> str | None:
    """Why the start may not go ahead on these rows (step 3), or None.

    `run` and `step` are the rows the transaction holds; `dispatch` is the one the command's
    approval names (read only when it carries one). Every reason is a low-sensitivity code.
    """
    wanted = command.step_run
    if run is None or run.project_id != command.project_id:
        return "run_missing"
    if run.status not in ACTIVE_RUN:
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


def build(command: tool_start.StartCommand, evidence: Evidence) -> StoredBarrier:
    """The barrier of a start whose evidence has just been written."""
    step, approval = command.step_run, command.approval
    barrier = tool_start.StartBarrier.model_validate(
        {
            "schema": tool_start.BARRIER_SCHEMA,
            "startId": command.start_id,
            "projectId": command.project_id,
            "runId": step.run_id,
            "stepRunId": step.step_run_id,
            "startedStepRunVersion": step.started_version,
            "startedStepRunDigest": evidence.started_step_run_digest,
            "commandDigest": evidence.command_digest,
            "snapshotDigest": command.snapshot_digest,
            "toolId": command.tool.tool_id,
            "toolVersion": command.tool.tool_version,
            "definitionDigest": command.tool.definition_digest,
            "policyFence": command.policy_fence,
            "actionDigest": command.action.action_digest,
            "admissionDigest": command.admission.admission_digest,
            "approvalRequestId": approval.approval_request_id if approval else None,
            "dispatchId": approval.dispatch_id if approval else None,
            "mutationId": evidence.mutation.mutation_id,
            "mutationDigest": evidence.mutation.mutation_digest,
            "runEventSeq": evidence.run_event_seq,
            "runVersion": evidence.run_version,
            "traceId": command.evidence.trace_id,
            "traceDigest": evidence.trace_digest,
            "auditEventId": evidence.audit_event_id,
            "auditReceiptId": command.evidence.audit_receipt_id,
            "auditReceiptDigest": evidence.audit_receipt_digest,
            "committedAtMs": evidence.committed_at_ms,
        },
        strict=True,
    )
    # One canonical dump for both the digest and the stored JSON.
    canonical_bytes = barrier.canonical_bytes()
    return StoredBarrier(
        barrier=barrier,
        barrier_digest=tool_start.barrier_digest(canonical_bytes),
        barrier_json=canonical_bytes.decode("utf-8"),
    )


def _corrupted(start_id: object, check: str) -> errors.StoreCorrupted:
    shown = start_id if isinstance(start_id, str) and len(start_id) <= 128 else "?"
    return errors.StoreCorrupted(
        f"tool start barrier {shown}: {check} fails its checks", code="barrier_corrupted"
    )


def _prefixed(row: records.RowLike, prefix: str, names: tuple[str, ...]) -> dict[str, object]:
    return {name: row[f"{prefix}{name}"] for name in names}


def _check_mutation(row: records.RowLike, barrier: tool_start.StartBarrier) -> None:
    if row["m_mutation_id"] is None:
        raise _corrupted(barrier.start_id, "ledger line (missing)")
    try:
        mutation = steps.Mutation.from_row(_prefixed(row, "m_", MUTATION_COLUMNS))
    except errors.StoreCorrupted:
        raise _corrupted(barrier.start_id, "ledger line") from None
    expected = (
        barrier.mutation_id,
        barrier.mutation_digest,
        barrier.step_run_id,
        barrier.run_id,
        barrier.project_id,
        steps.StepRunStatus.RUNNING,
        barrier.started_step_run_version,
        barrier.run_event_seq,
        barrier.run_version,
        barrier.committed_at_ms,
    )
    found = (
        mutation.mutation_id,
        mutation.mutation_digest,
        mutation.step_run_id,
        mutation.run_id,
        mutation.project_id,
        mutation.to_status,
        mutation.to_version,
        mutation.run_event_seq,
        mutation.run_version,
        mutation.committed_at_ms,
    )
    if found != expected or mutation.from_status not in steps.STARTABLE:
        raise _corrupted(barrier.start_id, "ledger line")


def _check_evidence(row: records.RowLike, barrier: tool_start.StartBarrier) -> None:
    if (row["e_event_type"], row["e_run_version"]) != (steps.EVENT_STARTED, barrier.run_version):
        raise _corrupted(barrier.start_id, "run event")
    binding_digest = row["s_binding_digest"]
    if binding_digest is None or barrier.started_step_run_digest != steps.started_digest(
        binding_digest,
        step_run_id=barrier.step_run_id,
        run_id=barrier.run_id,
        project_id=barrier.project_id,
        started_version=barrier.started_step_run_version,
    ):
        raise _corrupted(barrier.start_id, "started step run digest")
    trace = tool_start.trace_digest(
        trace_id=row["t_trace_id"] or "",
        project_id=row["t_project_id"] or "",
        run_id=row["t_run_id"] or "",
        step_run_id=row["t_step_run_id"] or "",
        start_id=row["t_start_id"] or "",
        command_digest=row["t_command_digest"] or "",
    )
    if not (trace == row["t_trace_digest"] == barrier.trace_digest) or (
        row["t_trace_id"] != barrier.trace_id or row["t_start_id"] != barrier.start_id
    ):
        raise _corrupted(barrier.start_id, "trace anchor")
    receipt = tool_start.receipt_digest(
        receipt_id=row["r_receipt_id"] or "",
        audit_event_id=row["a_event_id"] or 0,
        kind=row["a_kind"] or "",
        actor=row["a_actor"] or "",
        principal=row["a_principal"] or "",
        project_id=row["a_project_id"] or "",
        subject_id=row["a_subject_id"] or "",
        detail_code=row["a_detail_code"] or "",
        trace_id=row["r_trace_id"] or "",
        trace_digest=row["t_trace_digest"] or "",
        start_id=row["r_start_id"] or "",
    )
    if (
        not (receipt == row["r_receipt_digest"] == barrier.audit_receipt_digest)
        or row["r_audit_event_id"] != barrier.audit_event_id
        or row["a_event_id"] != barrier.audit_event_id
        or row["r_trace_id"] != barrier.trace_id
        or row["r_start_id"] != barrier.start_id
    ):
        raise _corrupted(barrier.start_id, "audit receipt")


def verify_row(row: records.RowLike) -> StoredBarrier:
    """Re-normalise and re-check one joined barrier row (see the module docstring)."""
    start_id = row["start_id"]
    text = row["barrier_json"]
    try:
        barrier = tool_start.parse_barrier(text)
    except errors.InvalidInput:
        raise _corrupted(start_id, "barrier JSON") from None
    canonical_bytes = barrier.canonical_bytes()
    if canonical_bytes.decode("utf-8") != text:
        raise _corrupted(start_id, "canonical form")
    digest = tool_start.barrier_digest(canonical_bytes)
    if row["barrier_digest"] != digest or row["schema_version"] != 1:
        raise _corrupted(start_id, "barrier digest")
    mirrors: Mapping[str, object] = barrier.columns()
    for name, value in mirrors.items():
        if row[name] != value:
            raise _corrupted(start_id, f"column {name}")
    _check_mutation(row, barrier)
    _check_evidence(row, barrier)
    return StoredBarrier(barrier=barrier, barrier_digest=digest, barrier_json=text)
