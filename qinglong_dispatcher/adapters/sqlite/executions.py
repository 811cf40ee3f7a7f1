"""Execution transactions on SQLite: claim, renew, start, release, complete and reads.

Each function is one transaction body over the single connection; the fencing decisions
come from `domain.fencing`, and every UPDATE repeats its conditions in SQL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from qinglong_dispatcher.adapters.sqlite.queries import Q
from qinglong_dispatcher.domain import fencing, ids, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus

_BEFORE_ALL = (-(2**63), "")


def record_event(
    conn: sqlite3.Connection,
    *,
    dispatch_id: str,
    version: int,
    from_status: ExecutionStatus | None,
    to_status: ExecutionStatus,
    attempt: int,
    owner: str | None,
    token: str | None,
    mutation_id: str | None = None,
    result_code: str | None = None,
) -> None:
    """Append the status change to `execution_events` in the caller's transaction."""
    conn.execute(
        Q["insert_event"],
        {
            "dispatch_id": dispatch_id,
            "version": version,
            "from_status": from_status.value if from_status else None,
            "to_status": to_status.value,
            "attempt": attempt,
            "lease_owner": owner,
            "lease_token": token,
            "mutation_id": mutation_id,
            "result_code": result_code,
        },
    )


def read_row(
    conn: sqlite3.Connection, dispatch_id: str
) -> tuple[records.Execution, records.Dispatch] | None:
    """The execution and its dispatch, or None."""
    row = conn.execute(Q["select_execution"], {"dispatch_id": dispatch_id}).fetchone()
    if row is None:
        return None
    return records.Execution.from_row(row), records.Dispatch.from_joined_row(row)


def _claim_row(
    conn: sqlite3.Connection,
    execution: records.Execution,
    dispatch: records.Dispatch,
    *,
    now_ms: int,
    owner: str,
    token: str,
    lease_ms: int,
    replay_token: str | None,
) -> records.Claim:
    step, outcome, reason = fencing.claim_step(
        execution, now_ms=now_ms, owner=owner, token=replay_token
    )
    dispatch_id = execution.dispatch_id
    if outcome is Outcome.REPLAYED:
        return records.Claim(
            outcome=outcome,
            dispatch_id=dispatch_id,
            lease=fencing.lease_of(execution),
            dispatch=dispatch,
        )
    if step is fencing.ClaimStep.NONE:
        return records.Claim(outcome=outcome, dispatch_id=dispatch_id, reason=reason)
    params = {"dispatch_id": dispatch_id, "version": execution.version, "now_ms": now_ms}
    if step is fencing.ClaimStep.EXHAUST:
        done = conn.execute(Q["exhaust_row"], {**params, "result_code": reason}).fetchone()
        if done is None:
            return records.Claim(outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced")
        record_event(
            conn,
            dispatch_id=dispatch_id,
            version=done["version"],
            from_status=execution.status,
            to_status=ExecutionStatus.BLOCKED,
            attempt=done["attempt"],
            owner=execution.lease_owner,
            token=execution.lease_token,
            result_code=reason,
        )
        return records.Claim(outcome=Outcome.EXHAUSTED, dispatch_id=dispatch_id, reason=reason)
    expires = now_ms + lease_ms
    done = conn.execute(
        Q["lease_row"], {**params, "owner": owner, "token": token, "expires_at_ms": expires}
    ).fetchone()
    if done is None:
        return records.Claim(outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced")
    record_event(
        conn,
        dispatch_id=dispatch_id,
        version=done["version"],
        from_status=execution.status,
        to_status=ExecutionStatus.LEASED,
        attempt=done["attempt"],
        owner=owner,
        token=token,
    )
    lease = records.Lease(
        dispatch_id=dispatch_id,
        attempt=done["attempt"],
        owner=owner,
        token=token,
        version=done["version"],
        expires_at_ms=expires,
    )
    return records.Claim(
        outcome=Outcome.CLAIMED, dispatch_id=dispatch_id, lease=lease, dispatch=dispatch
    )


def claim_due(
    conn: sqlite3.Connection, *, now_ms: int, owner: str, limit: int, lease_ms: int
) -> records.ClaimBatch:
    """One due observation and a fenced claim of each observed row, in this transaction."""
    rows = conn.execute(
        Q["select_due"],
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_eligible_at_ms": _BEFORE_ALL[0],
            "after_dispatch_id": _BEFORE_ALL[1],
        },
    ).fetchall()
    claims = tuple(
        _claim_row(
            conn,
            records.Execution.from_row(row),
            records.Dispatch.from_joined_row(row),
            now_ms=now_ms,
            owner=owner,
            token=ids.new_lease_token(),
            lease_ms=lease_ms,
            replay_token=None,
        )
        for row in rows
    )
    return records.ClaimBatch(claims=claims, observed=len(rows))


def claim(
    conn: sqlite3.Connection,
    dispatch_id: str,
    *,
    now_ms: int,
    owner: str,
    token: str,
    lease_ms: int,
) -> records.Claim:
    """Claim one row with the caller's token; the same token replays an unexpired lease."""
    found = read_row(conn, dispatch_id)
    if found is None:
        return records.Claim(outcome=Outcome.NOT_FOUND, dispatch_id=dispatch_id)
    execution, dispatch = found
    return _claim_row(
        conn,
        execution,
        dispatch,
        now_ms=now_ms,
        owner=owner,
        token=token,
        lease_ms=lease_ms,
        replay_token=token,
    )


def renew(
    conn: sqlite3.Connection, lease: records.Lease, *, now_ms: int, lease_ms: int
) -> records.Renewal:
    """Extend an unexpired lease (leased or executing) that carries the exact version."""
    found = read_row(conn, lease.dispatch_id)
    if found is None:
        return records.Renewal(outcome=Outcome.NOT_FOUND, reason="not_found")
    execution, _ = found
    refusal = fencing.renew_refusal(execution, lease, now_ms=now_ms)
    if refusal is not None:
        outcome = Outcome.EXPIRED if refusal == "lease_expired" else Outcome.CONFLICT
        return records.Renewal(outcome=outcome, reason=refusal)
    expires = now_ms + lease_ms
    done = conn.execute(
        Q["renew_lease"],
        {
            "dispatch_id": lease.dispatch_id,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "attempt": lease.attempt,
            "now_ms": now_ms,
            "expires_at_ms": expires,
        },
    ).fetchone()
    if done is None:
        return records.Renewal(outcome=Outcome.CONFLICT, reason="raced")
    renewed = records.Lease(
        dispatch_id=lease.dispatch_id,
        attempt=lease.attempt,
        owner=lease.owner,
        token=lease.token,
        version=done["version"],
        expires_at_ms=done["lease_expires_at_ms"],
    )
    return records.Renewal(outcome=Outcome.RENEWED, lease=renewed)


def _start_one(
    conn: sqlite3.Connection, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult:
    lease = request.lease
    done = conn.execute(
        Q["start_fast"],
        {
            "dispatch_id": lease.dispatch_id,
            "approval_request_id": request.approval_request_id,
            "action_digest": request.action_digest,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "attempt": lease.attempt,
            "now_ms": now_ms,
            "expires_at_ms": fencing.start_lease_expiry(lease, now_ms=now_ms, lease_ms=lease_ms),
        },
    ).fetchone()
    if done is None:
        return _start_refused(conn, request, now_ms=now_ms)
    record_event(
        conn,
        dispatch_id=lease.dispatch_id,
        version=done["version"],
        from_status=ExecutionStatus.LEASED,
        to_status=ExecutionStatus.EXECUTING,
        attempt=lease.attempt,
        owner=lease.owner,
        token=lease.token,
    )
    identity = fencing.started_identity(
        lease,
        started_at_ms=now_ms,
        version=done["version"],
        lease_expires_at_ms=done["lease_expires_at_ms"],
    )
    return records.StartResult(
        outcome=Outcome.STARTED, dispatch_id=lease.dispatch_id, identity=identity
    )


def _start_refused(
    conn: sqlite3.Connection, request: records.StartRequest, *, now_ms: int
) -> records.StartResult:
    """The fenced update matched nothing: read the row and let the domain say why."""
    lease = request.lease
    found = read_row(conn, lease.dispatch_id)
    if found is None:
        return records.StartResult(
            outcome=Outcome.NOT_FOUND, dispatch_id=lease.dispatch_id, reason="not_found"
        )
    execution, dispatch = found
    outcome, reason = fencing.start_check(execution, dispatch, request, now_ms=now_ms)
    if outcome is Outcome.REPLAYED:
        return records.StartResult(
            outcome=outcome,
            dispatch_id=lease.dispatch_id,
            identity=fencing.identity_of(execution),
        )
    # In one BEGIN IMMEDIATE nothing changed since the update: start_check must refuse too.
    return records.StartResult(
        outcome=outcome or Outcome.CONFLICT, dispatch_id=lease.dispatch_id, reason=reason
    )


def start(
    conn: sqlite3.Connection,
    requests: Sequence[records.StartRequest],
    *,
    now_ms: int,
    lease_ms: int,
) -> list[records.StartResult]:
    """Commit the start barrier of each request; each item stands or falls on its own fence."""
    return [_start_one(conn, request, now_ms=now_ms, lease_ms=lease_ms) for request in requests]


def list_due(
    conn: sqlite3.Connection, *, now_ms: int, limit: int, after: tuple[int, str] | None
) -> list[records.Execution]:
    """A keyset page of the due index, read only."""
    first = after or _BEFORE_ALL
    rows = conn.execute(
        Q["select_due"],
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_eligible_at_ms": first[0],
            "after_dispatch_id": first[1],
        },
    ).fetchall()
    return [records.Execution.from_row(row) for row in rows]


def counts(conn: sqlite3.Connection, *, now_ms: int) -> records.StatusCounts:
    """Counts per effective status, due backlog, oldest due age and Runs."""
    per_status = {states.EffectiveStatus(s.value): 0 for s in ExecutionStatus}
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = 0
    for row in conn.execute(Q["count_by_status"]):
        per_status[states.EffectiveStatus(row["status"])] = row["n"]
    recovery = conn.execute(Q["count_recovery_required"], {"now_ms": now_ms}).fetchone()["n"]
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = recovery
    per_status[states.EffectiveStatus.EXECUTING] -= recovery
    due = conn.execute(Q["due_summary"], {"now_ms": now_ms}).fetchone()
    runs = conn.execute(Q["count_runs"]).fetchone()["n"]
    oldest = due["oldest"]
    return records.StatusCounts(
        executions=per_status,
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        runs=runs,
    )


def backlog(conn: sqlite3.Connection, *, now_ms: int, cap: int) -> records.Backlog:
    """The metrics gauges, from queries bounded by the due cap and the started rows."""
    due = conn.execute(Q["backlog_due"], {"now_ms": now_ms, "cap": cap}).fetchone()
    started = conn.execute(Q["backlog_started"], {"now_ms": now_ms}).fetchone()
    oldest = due["oldest"]
    return records.Backlog(
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        executing=started["n"] - started["expired"],
        recovery_required=started["expired"],
    )


def events(conn: sqlite3.Connection, dispatch_id: str) -> list[records.ExecutionEvent]:
    """The history of one execution."""
    return [
        records.ExecutionEvent.from_row(r)
        for r in conn.execute(Q["select_events"], {"dispatch_id": dispatch_id})
    ]
