"""Execution transactions on PostgreSQL: claim, renew, start, and the reads.

The same bodies as the SQLite adapter, over one pooled connection inside one transaction.
Writers lock the row they decide about (`FOR UPDATE`; the due scan `FOR UPDATE SKIP
LOCKED`), ask `domain.fencing`, and write with an update that repeats the same conditions,
so a replica that raced in between is never overwritten. Releases and completions live in
`completions`.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres.queries import CLAIM_DUE, LOCK_EXECUTION, Q
from qinglong_dispatcher.domain import fencing, ids, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus

_BEFORE_ALL = (-(2**63), "")


def event_args(
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
) -> list[object]:
    """The positional arguments of one `insert_event`."""
    return Q["insert_event"].args(
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
        }
    )


async def record_event(
    conn: db.Connection,
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
    await conn.execute(
        Q["insert_event"].text,
        *event_args(
            dispatch_id=dispatch_id,
            version=version,
            from_status=from_status,
            to_status=to_status,
            attempt=attempt,
            owner=owner,
            token=token,
            mutation_id=mutation_id,
            result_code=result_code,
        ),
    )


async def read_row(
    conn: db.Connection, dispatch_id: str, *, lock: bool = False
) -> tuple[records.Execution, records.Dispatch] | None:
    """The execution and its dispatch, or None; `lock` holds the row until commit."""
    statement = LOCK_EXECUTION if lock else Q["select_execution"]
    row = await db.fetchrow(conn, statement, {"dispatch_id": dispatch_id})
    if row is None:
        return None
    return records.Execution.from_row(row), records.Dispatch.from_joined_row(row)


async def _claim_row(
    conn: db.Connection,
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
        done = await db.fetchrow(conn, Q["exhaust_row"], {**params, "result_code": reason})
        if done is None:
            return records.Claim(outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced")
        await record_event(
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
    done = await db.fetchrow(
        conn,
        Q["lease_row"],
        {**params, "owner": owner, "token": token, "expires_at_ms": expires},
    )
    if done is None:
        return records.Claim(outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced")
    await record_event(
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


async def claim_due(
    conn: db.Connection, *, now_ms: int, owner: str, limit: int, lease_ms: int
) -> records.ClaimBatch:
    """One due observation that locks what it sees (skipping rows other replicas hold), and a
    fenced claim of each observed row, in this transaction.

    The domain decides each row as for a single claim; the page's lease updates then go to the
    server as one pipelined batch (`fetchmany`) and their ledger events as another
    (`executemany`): two round trips for the page instead of two per row.
    """
    rows = await db.fetch(
        conn,
        CLAIM_DUE,
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_eligible_at_ms": _BEFORE_ALL[0],
            "after_dispatch_id": _BEFORE_ALL[1],
        },
    )
    claims: dict[str, records.Claim] = {}
    to_lease: list[tuple[records.Execution, records.Dispatch, str]] = []
    for row in rows:
        execution = records.Execution.from_row(row)
        dispatch = records.Dispatch.from_joined_row(row)
        step, _, _ = fencing.claim_step(execution, now_ms=now_ms, owner=owner, token=None)
        if step is fencing.ClaimStep.LEASE:
            to_lease.append((execution, dispatch, ids.new_lease_token()))
        else:  # exhausted (rare) or not claimable: the single-row path decides and writes
            claims[execution.dispatch_id] = await _claim_row(
                conn,
                execution,
                dispatch,
                now_ms=now_ms,
                owner=owner,
                token=ids.new_lease_token(),
                lease_ms=lease_ms,
                replay_token=None,
            )
    if to_lease:
        expires = now_ms + lease_ms
        statement = Q["lease_row"]
        done = {
            r["dispatch_id"]: r
            for r in await conn.fetchmany(
                statement.text,
                [
                    statement.args(
                        {
                            "dispatch_id": execution.dispatch_id,
                            "version": execution.version,
                            "now_ms": now_ms,
                            "owner": owner,
                            "token": token,
                            "expires_at_ms": expires,
                        }
                    )
                    for execution, _, token in to_lease
                ],
            )
        }
        events = []
        for execution, dispatch, token in to_lease:
            leased = done.get(execution.dispatch_id)
            if leased is None:
                claims[execution.dispatch_id] = records.Claim(
                    outcome=Outcome.CONFLICT, dispatch_id=execution.dispatch_id, reason="raced"
                )
                continue
            events.append(
                event_args(
                    dispatch_id=execution.dispatch_id,
                    version=leased["version"],
                    from_status=execution.status,
                    to_status=ExecutionStatus.LEASED,
                    attempt=leased["attempt"],
                    owner=owner,
                    token=token,
                )
            )
            claims[execution.dispatch_id] = records.Claim(
                outcome=Outcome.CLAIMED,
                dispatch_id=execution.dispatch_id,
                lease=records.Lease(
                    dispatch_id=execution.dispatch_id,
                    attempt=leased["attempt"],
                    owner=owner,
                    token=token,
                    version=leased["version"],
                    expires_at_ms=expires,
                ),
                dispatch=dispatch,
            )
        if events:
            await conn.executemany(Q["insert_event"].text, events)
    ordered = tuple(claims[row["dispatch_id"]] for row in rows)
    return records.ClaimBatch(claims=ordered, observed=len(rows))


async def claim(
    conn: db.Connection,
    dispatch_id: str,
    *,
    now_ms: int,
    owner: str,
    token: str,
    lease_ms: int,
) -> records.Claim:
    """Claim one row with the caller's token; the same token replays an unexpired lease."""
    found = await read_row(conn, dispatch_id, lock=True)
    if found is None:
        return records.Claim(outcome=Outcome.NOT_FOUND, dispatch_id=dispatch_id)
    execution, dispatch = found
    return await _claim_row(
        conn,
        execution,
        dispatch,
        now_ms=now_ms,
        owner=owner,
        token=token,
        lease_ms=lease_ms,
        replay_token=token,
    )


async def renew(
    conn: db.Connection, lease: records.Lease, *, now_ms: int, lease_ms: int
) -> records.Renewal:
    """Extend an unexpired lease (leased or executing) that carries the exact version."""
    found = await read_row(conn, lease.dispatch_id, lock=True)
    if found is None:
        return records.Renewal(outcome=Outcome.NOT_FOUND, reason="not_found")
    execution, _ = found
    refusal = fencing.renew_refusal(execution, lease, now_ms=now_ms)
    if refusal is not None:
        outcome = Outcome.EXPIRED if refusal == "lease_expired" else Outcome.CONFLICT
        return records.Renewal(outcome=outcome, reason=refusal)
    expires = now_ms + lease_ms
    done = await db.fetchrow(
        conn,
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
    )
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


async def _start_one(
    conn: db.Connection, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult:
    lease = request.lease
    found = await read_row(conn, lease.dispatch_id, lock=True)
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
    if outcome is not None:
        return records.StartResult(outcome=outcome, dispatch_id=lease.dispatch_id, reason=reason)
    done = await db.fetchrow(
        conn,
        Q["start_row"],
        {
            "dispatch_id": lease.dispatch_id,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "attempt": lease.attempt,
            "now_ms": now_ms,
            "expires_at_ms": fencing.start_lease_expiry(lease, now_ms=now_ms, lease_ms=lease_ms),
        },
    )
    if done is None:
        return records.StartResult(
            outcome=Outcome.CONFLICT, dispatch_id=lease.dispatch_id, reason="raced"
        )
    await record_event(
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


async def start_fast(
    database: db.Database, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult | None:
    """The barrier in one statement when everything matches; None sends the caller to `start`."""
    lease = request.lease
    done = await database.statement(
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
    )
    if done is None:
        return None
    identity = fencing.started_identity(
        lease,
        started_at_ms=now_ms,
        version=done["version"],
        lease_expires_at_ms=done["lease_expires_at_ms"],
    )
    return records.StartResult(
        outcome=Outcome.STARTED, dispatch_id=lease.dispatch_id, identity=identity
    )


async def start(
    conn: db.Connection, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
) -> list[records.StartResult]:
    """Commit the start barrier of each request; each item stands or falls on its own fence."""
    return [
        await _start_one(conn, request, now_ms=now_ms, lease_ms=lease_ms) for request in requests
    ]


async def list_due(
    conn: db.Connection, *, now_ms: int, limit: int, after: tuple[int, str] | None
) -> list[records.Execution]:
    """A keyset page of the due index, read only (no locks)."""
    first = after or _BEFORE_ALL
    rows = await db.fetch(
        conn,
        Q["select_due"],
        {
            "now_ms": now_ms,
            "limit": limit,
            "after_eligible_at_ms": first[0],
            "after_dispatch_id": first[1],
        },
    )
    return [records.Execution.from_row(row) for row in rows]


async def counts(conn: db.Connection, *, now_ms: int) -> records.StatusCounts:
    """Counts per effective status, due backlog, oldest due age and Runs (one snapshot)."""
    per_status = {states.EffectiveStatus(s.value): 0 for s in ExecutionStatus}
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = 0
    for row in await db.fetch(conn, Q["count_by_status"], {}):
        per_status[states.EffectiveStatus(row["status"])] = row["n"]
    recovery = (await db.fetchrow(conn, Q["count_recovery_required"], {"now_ms": now_ms}))["n"]
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = recovery
    per_status[states.EffectiveStatus.EXECUTING] -= recovery
    due = await db.fetchrow(conn, Q["due_summary"], {"now_ms": now_ms})
    runs = (await db.fetchrow(conn, Q["count_runs"], {}))["n"]
    oldest = due["oldest"]
    return records.StatusCounts(
        executions=per_status,
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        runs=runs,
    )


async def backlog(conn: db.Connection, *, now_ms: int, cap: int) -> records.Backlog:
    """The metrics gauges, from queries bounded by the due cap and the started rows."""
    due = await db.fetchrow(conn, Q["backlog_due"], {"now_ms": now_ms, "cap": cap})
    started = await db.fetchrow(conn, Q["backlog_started"], {"now_ms": now_ms})
    oldest = due["oldest"]
    return records.Backlog(
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        executing=started["n"] - started["expired"],
        recovery_required=started["expired"],
    )


async def events(conn: db.Connection, dispatch_id: str) -> list[records.ExecutionEvent]:
    """The history of one execution."""
    rows = await db.fetch(conn, Q["select_events"], {"dispatch_id": dispatch_id})
    return [records.ExecutionEvent.from_row(r) for r in rows]
