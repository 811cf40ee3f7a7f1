"""Recovery transactions on SQLite: list, resolve under the snapshot fence, observe, audit."""

from __future__ import annotations

import getpass
import os
import sqlite3

from qinglong_dispatcher.adapters.sqlite import executions, tool_steps
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import fencing, records, recovery, states, tool_start
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus

_BEFORE_ALL = (-(2**63), "")


def os_principal() -> str:
    """On an edge device file permissions are the authority: the OS user is the principal."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.geteuid()}"


def _snapshot(row: sqlite3.Row) -> recovery.Snapshot:
    observation = None
    if row["observation_outcome"] is not None:
        observation = recovery.Observation(
            outcome=recovery.ObservationOutcome(row["observation_outcome"]),
            reason_code=row["observation_reason"],
            count=row["observation_count"],
            last_seen_at_ms=row["observation_last_seen_at_ms"],
        )
    return recovery.Snapshot(
        execution=records.Execution.from_row(row),
        dispatch=records.Dispatch.from_joined_row(row),
        observation=observation,
    )


def list_recovery_required(
    conn: sqlite3.Connection, *, now_ms: int, limit: int, after: tuple[int, str] | None
) -> list[recovery.Snapshot]:
    """A keyset page over the executing index: rows whose lease expired."""
    first = after or _BEFORE_ALL
    rows = conn.execute(
        Q["select_recovery_required"],
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_expires_at_ms": first[0],
            "after_dispatch_id": first[1],
        },
    ).fetchall()
    return [_snapshot(row) for row in rows]


def resolve(
    conn: sqlite3.Connection, resolution: recovery.Resolution, *, now_ms: int
) -> records.Transition:
    """Settle the row if it still matches the snapshot; the first committed writer wins."""
    fence = resolution.fence
    found = executions.read_row(conn, fence.dispatch_id)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=fence.dispatch_id, reason="not_found"
        )
    execution, dispatch = found
    database_ms = int(conn.execute(Q["database_now"]).fetchone()[0])
    settling_ms = recovery.settling_now_ms(now_ms, database_ms)
    refusal = recovery.resolve_refusal(execution, fence, settling_ms=settling_ms)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT,
            dispatch_id=fence.dispatch_id,
            status=execution.status,
            reason=refusal,
        )
    target = ExecutionStatus(resolution.resolution.value)
    mutation = fencing.mutation_id(fence.dispatch_id, fence.attempt, "recovery")
    params = {
        "dispatch_id": fence.dispatch_id,
        "version": fence.version,
        "owner": fence.owner,
        "token": fence.token,
        "attempt": fence.attempt,
        "started_at_ms": fence.started_at_ms,
        "now_ms": now_ms,
    }
    done = conn.execute(
        Q["resolve_row"],
        {
            **params,
            "to_status": target.value,
            "mutation_id": mutation,
            "result_code": resolution.reason_code,
            "expired_by_ms": settling_ms,
        },
    ).fetchone()
    if done is None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=fence.dispatch_id, reason="raced"
        )
    principal = os_principal()
    conn.execute(
        Q["insert_resolution"],
        {
            **params,
            "source": resolution.source.value,
            "resolution": resolution.resolution.value,
            "evidence_digest": resolution.evidence_digest,
            "resolved_by": resolution.resolved_by,
            "principal": principal,
            "reason_code": resolution.reason_code,
        },
    )
    executions.record_event(
        conn,
        dispatch_id=fence.dispatch_id,
        version=done["version"],
        from_status=ExecutionStatus.EXECUTING,
        to_status=target,
        attempt=fence.attempt,
        owner=fence.owner,
        token=fence.token,
        mutation_id=mutation,
        result_code=resolution.reason_code,
    )
    if dispatch.action_type == tool_start.TOOL_INVOKE:
        # Bookkeeping only, in this transaction: the StepRun follows its dispatch.
        tool_steps.settle(
            conn,
            dispatch,
            resolution=resolution.resolution.value,
            reason_code=resolution.reason_code,
            now_ms=now_ms,
        )
    if resolution.source is recovery.Source.MANUAL:
        conn.execute(
            Q["insert_audit_event"],
            {
                "kind": recovery.AUDIT_MANUAL_RESOLUTION,
                "actor": resolution.resolved_by,
                "principal": principal,
                "project_id": resolution.project_id,
                "subject_id": fence.dispatch_id,
                "detail_code": f"{resolution.resolution.value}:{resolution.reason_code}"[:128],
            },
        )
    return records.Transition(
        outcome=Outcome.COMPLETED,
        dispatch_id=fence.dispatch_id,
        status=target,
        version=done["version"],
    )


def record_observation(
    conn: sqlite3.Connection,
    *,
    dispatch_id: str,
    outcome: recovery.ObservationOutcome,
    reason_code: str,
    now_ms: int,
) -> None:
    """Upsert the last reconcile outcome."""
    conn.execute(
        Q["upsert_observation"],
        {
            "dispatch_id": dispatch_id,
            "outcome": outcome.value,
            "reason_code": reason_code,
            "now_ms": now_ms,
        },
    )


def get_resolution(conn: sqlite3.Connection, dispatch_id: str) -> recovery.StoredResolution | None:
    """The resolution row of a dispatch."""
    row = conn.execute(Q["select_resolution"], {"dispatch_id": dispatch_id}).fetchone()
    if row is None:
        return None
    return recovery.StoredResolution(
        dispatch_id=row["dispatch_id"],
        source=recovery.Source(row["source"]),
        resolution=states.Completion(row["resolution"]),
        evidence_digest=row["evidence_digest"],
        resolved_by=row["resolved_by"],
        principal=row["principal"],
        reason_code=row["reason_code"],
        committed_at_ms=row["committed_at_ms"],
    )


def audit_events(conn: sqlite3.Connection, subject_id: str) -> list[recovery.AuditEvent]:
    """Audit records about one subject."""
    return [
        recovery.AuditEvent(
            kind=row["kind"],
            actor=row["actor"],
            principal=row["principal"],
            project_id=row["project_id"],
            subject_id=row["subject_id"],
            detail_code=row["detail_code"],
            committed_at_ms=row["committed_at_ms"],
        )
        for row in conn.execute(Q["select_audit_events"], {"subject_id": subject_id})
    ]
