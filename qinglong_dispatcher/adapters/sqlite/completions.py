"""Pre-barrier releases and completions on SQLite, replayed by mutation id (DESIGN.md §3).

Each function is one transaction body over the single connection; the fencing decisions come
from `domain.fencing`, and every UPDATE repeats its conditions in SQL.
"""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher.adapters.sqlite.executions import read_row, record_event
from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import fencing, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus


def _replayed_mutation(
    conn: sqlite3.Connection,
    dispatch_id: str,
    mutation_id: str,
    *,
    to_status: ExecutionStatus,
    result_code: str,
    owner: str,
    token: str,
) -> records.Transition | None:
    row = conn.execute(
        Q["select_event_by_mutation"], {"dispatch_id": dispatch_id, "mutation_id": mutation_id}
    ).fetchone()
    if row is None:
        return None
    event = records.ExecutionEvent.from_row(row)
    outcome, reason = fencing.mutation_replay(
        event, to_status=to_status, result_code=result_code, owner=owner, token=token
    )
    return records.Transition(
        outcome=outcome,
        dispatch_id=dispatch_id,
        status=event.to_status,
        version=event.version,
        reason=reason,
    )


def release_preflight(
    conn: sqlite3.Connection,
    lease: records.Lease,
    *,
    mutation_id: str,
    kind: states.ReleaseKind,
    result_code: str,
    retry_at_ms: int | None,
    now_ms: int,
) -> records.Transition:
    """Give a claim back before the barrier; replays by mutation id."""
    found = read_row(conn, lease.dispatch_id)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=lease.dispatch_id, reason="not_found"
        )
    execution, _ = found
    target = states.release_target(kind, lease.attempt, execution.max_attempts)
    replay = _replayed_mutation(
        conn,
        lease.dispatch_id,
        mutation_id,
        to_status=target,
        result_code=result_code,
        owner=lease.owner,
        token=lease.token,
    )
    if replay is not None:
        return replay
    refusal = fencing.release_refusal(execution, lease)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=lease.dispatch_id, reason=refusal
        )
    eligible = {
        ExecutionStatus.PENDING: now_ms,
        ExecutionStatus.RETRY_WAIT: retry_at_ms if retry_at_ms is not None else now_ms,
    }.get(target)
    done = conn.execute(
        Q["release_row"],
        {
            "dispatch_id": lease.dispatch_id,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "attempt": lease.attempt,
            "to_status": target.value,
            "eligible_at_ms": eligible,
            "retry_at_ms": eligible if target is ExecutionStatus.RETRY_WAIT else None,
            "refund": 1 if kind is states.ReleaseKind.YIELD else 0,
            "mutation_id": mutation_id,
            "result_code": result_code,
            "completed_at_ms": now_ms if target is ExecutionStatus.BLOCKED else None,
            "now_ms": now_ms,
        },
    ).fetchone()
    if done is None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=lease.dispatch_id, reason="raced"
        )
    record_event(
        conn,
        dispatch_id=lease.dispatch_id,
        version=done["version"],
        from_status=ExecutionStatus.LEASED,
        to_status=target,
        attempt=done["attempt"],
        owner=lease.owner,
        token=lease.token,
        mutation_id=mutation_id,
        result_code=result_code,
    )
    return records.Transition(
        outcome=Outcome.RELEASED,
        dispatch_id=lease.dispatch_id,
        status=target,
        version=done["version"],
    )


def complete(
    conn: sqlite3.Connection,
    identity: records.ExecutionIdentity,
    *,
    mutation_id: str,
    completion: states.Completion,
    result_code: str,
    now_ms: int,
) -> records.Transition:
    """Record the terminal result under the execution identity; a renewed version is fine."""
    target = ExecutionStatus(completion.value)
    replay = _replayed_mutation(
        conn,
        identity.dispatch_id,
        mutation_id,
        to_status=target,
        result_code=result_code,
        owner=identity.owner,
        token=identity.token,
    )
    if replay is not None:
        return replay
    found = read_row(conn, identity.dispatch_id)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=identity.dispatch_id, reason="not_found"
        )
    execution, _ = found
    refusal = fencing.complete_refusal(execution, identity)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=identity.dispatch_id, reason=refusal
        )
    return complete_checked(
        conn,
        identity,
        mutation_id=mutation_id,
        completion=completion,
        result_code=result_code,
        now_ms=now_ms,
    )


def complete_checked(
    conn: sqlite3.Connection,
    identity: records.ExecutionIdentity,
    *,
    mutation_id: str,
    completion: states.Completion,
    result_code: str,
    now_ms: int,
) -> records.Transition:
    """The completion write itself, for a caller that already read and fenced the row in this
    transaction (the update still repeats every condition)."""
    target = ExecutionStatus(completion.value)
    done = conn.execute(
        Q["complete_row"],
        {
            "dispatch_id": identity.dispatch_id,
            "version": identity.version,
            "owner": identity.owner,
            "token": identity.token,
            "attempt": identity.attempt,
            "started_at_ms": identity.started_at_ms,
            "to_status": target.value,
            "mutation_id": mutation_id,
            "result_code": result_code,
            "now_ms": now_ms,
        },
    ).fetchone()
    if done is None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=identity.dispatch_id, reason="raced"
        )
    record_event(
        conn,
        dispatch_id=identity.dispatch_id,
        version=done["version"],
        from_status=ExecutionStatus.EXECUTING,
        to_status=target,
        attempt=identity.attempt,
        owner=identity.owner,
        token=identity.token,
        mutation_id=mutation_id,
        result_code=result_code,
    )
    return records.Transition(
        outcome=Outcome.COMPLETED,
        dispatch_id=identity.dispatch_id,
        status=target,
        version=done["version"],
    )
