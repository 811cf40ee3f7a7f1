"""Rows walked into every state by raw SQL; raw writes that name the trigger rule refusing them."""

from __future__ import annotations

import re
import sqlite3

import asyncpg

from qinglong_dispatcher.domain import states
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, recovery, stores, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.stores import Harness

E = ExecutionStatus
S = steps.StepRunStatus
EXECUTIONS = "approved_action_dispatch_executions"
REFUSED = re.compile(r"qinglong:transition_refused: (\w+)")

Sets = dict[str, str]
"""Column → SQL expression of one UPDATE."""

EXECUTION_PATHS: dict[ExecutionStatus, tuple[ExecutionStatus, ...]] = {
    E.PENDING: (E.LEASED, E.PENDING),
    E.LEASED: (E.LEASED,),
    E.RETRY_WAIT: (E.LEASED, E.RETRY_WAIT),
    E.EXECUTING: (E.LEASED, E.EXECUTING),
    E.SUCCEEDED: (E.LEASED, E.EXECUTING, E.SUCCEEDED),
    E.FAILED: (E.LEASED, E.EXECUTING, E.FAILED),
    E.BLOCKED: (E.LEASED, E.EXECUTING, E.BLOCKED),
    E.CANCELLED: (E.CANCELLED,),
}
"""The shortest walk of allowed row changes from a fresh execution into each status (`pending`
by way of a claim given back for want of a handler: a handler wait, which may be woken)."""

STEP_PATHS: dict[steps.StepRunStatus, tuple[steps.StepRunStatus, ...]] = {
    S.READY: (),
    S.WAITING_APPROVAL: (),
    S.RUNNING: (S.RUNNING,),
    S.SUCCEEDED: (S.RUNNING, S.SUCCEEDED),
    S.FAILED: (S.RUNNING, S.FAILED),
    S.LOST: (S.RUNNING, S.LOST),
}
"""The same for StepRuns (`waiting_approval` is inserted so: nothing moves back into it)."""


def cancel_audit(h: Harness, where: str) -> str:
    """The `dispatch.cancelled` audit rows a cancel of the rows `where` selects needs first
    (migration accountable_changes): this change (`<status>:test`), by the acting login."""
    principal = "session_user" if h.dialect == "postgres" else "'test'"
    return (
        f"INSERT INTO {faults.table(h, 'security_audit_events')} (kind, actor, principal, "
        "project_id, subject_id, detail_code, committed_at_ms) SELECT 'dispatch.cancelled', "
        f"'test', {principal}, project_id, dispatch_id, status || ':test', 0 "
        f"FROM {faults.table(h, EXECUTIONS)} WHERE {where}"
    )


async def raw_after(h: Harness, first: str | None, sql: str) -> list[dict[str, object]]:
    """`sql` as `h.raw` runs it, after `first` in the same transaction (when given)."""
    if first is None:
        return await h.raw(sql)
    if h.dialect != "postgres":
        await h.raw(first)  # SQLite binds no audit row to its transaction
        return await h.raw(sql)
    (database,) = await h.raw("SELECT current_database() AS name")
    conn = await asyncpg.connect(stores.pg_url(str(database["name"])), timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(first)
            return [dict(row.items()) for row in await conn.fetch(sql)]
    finally:
        await conn.close()


async def refusal(h: Harness, sql: str, *, first: str | None = None) -> str | None:
    """Run one raw write of one row (after `first`): the rule that refused it, or None when it
    was applied."""
    try:
        rows = await raw_after(h, first, sql)
    except (sqlite3.IntegrityError, asyncpg.PostgresError) as exc:
        match = REFUSED.search(str(exc))
        if match is None:
            raise
        # SQLite's RAISE(ABORT) has no SQLSTATE; PostgreSQL's refusal must carry ours.
        sqlstate = getattr(exc, "sqlstate", None) if h.dialect == "postgres" else "QLT01"
        rule = match.group(1)
    else:
        assert len(rows) == 1, sql
        return None
    assert sqlstate == "QLT01"
    return rule


def in_list(ids: list[str]) -> str:
    """An SQL `IN` list of test-made ids."""
    return "(" + ", ".join(f"'{i}'" for i in ids) + ")"


def literal(value: object) -> str:
    """An SQL literal of a test-made value."""
    if value is None:
        return "NULL"
    return str(value) if isinstance(value, int) else f"'{value}'"


def execution_move(before: ExecutionStatus, after: ExecutionStatus, now_ms: int) -> Sets:
    """`before → after` as the store would write it: CHECK-valid, version + 1.

    A claim takes the next attempt and a fresh lease; a yield refunds the attempt (here the
    wait of a missing handler, due a lease later); leased → leased is the renew (a takeover is
    `takeover_move`); pending → pending wakes a handler wait; anything else keeps the fence.
    """
    due = (E.PENDING, E.LEASED, E.RETRY_WAIT)
    sets = {
        "status": f"'{after}'",
        "version": "version + 1",
        "updated_at_ms": str(now_ms),
        "eligible_at_ms": str(now_ms + LEASE_MS) if after in due else "NULL",
    }
    if after is E.RETRY_WAIT:
        sets["retry_at_ms"] = str(now_ms + LEASE_MS)
    if after is E.LEASED and before is not E.LEASED:
        sets |= {
            "attempt": "attempt + 1",
            "lease_owner": "'w-claim'",
            "lease_token": "'t' || (version + 1)",
            "lease_proof": "'p:t' || (version + 1)",
            "started_at_ms": "NULL",
        }
    elif (before, after) == (E.LEASED, E.PENDING):
        sets |= {"attempt": "attempt - 1", "result_code": "'handler_missing'"}
    elif (before, after) == (E.PENDING, E.PENDING):
        sets["eligible_at_ms"] = str(now_ms)
    elif after in (E.LEASED, E.EXECUTING):
        # Only a row without a lease changes here, by pairs the domain refuses anyway.
        sets |= {
            "lease_owner": "COALESCE(lease_owner, 'w1')",
            "lease_token": "COALESCE(lease_token, 't1')",
        }
    if after in (E.LEASED, E.EXECUTING):
        sets["lease_expires_at_ms"] = str(now_ms + LEASE_MS)
    if after is E.EXECUTING:
        sets["started_at_ms"] = f"COALESCE(started_at_ms, {now_ms})"
    if after in states.TERMINAL:
        # A waiting row is blocked only as the product exhausts it, with its code (migration
        # accountable_changes; the budget is the caller's to spend).
        exhausted = after is E.BLOCKED and before in (E.PENDING, E.RETRY_WAIT)
        sets |= {
            "completed_at_ms": str(now_ms),
            "result_code": "'attempts_exhausted'" if exhausted else "'test'",
            "result_mutation_id": "'m' || (version + 1)",
        }
    # The holder's proof of a lease a claim above made (migration 0011 asks for it on
    # PostgreSQL; `set_list` leaves it out on SQLite, which stores none).
    sets.setdefault("lease_proof", "'p:' || lease_token")
    return sets


def takeover_move(now_ms: int, token: str = "t-next") -> Sets:
    """leased → leased by another claimant once the lease expired: the attempt stays (the dead
    holder's is refunded), one more takeover, a fresh lease."""
    return {
        "status": "'leased'",
        "version": "version + 1",
        "takeovers": "takeovers + 1",
        "lease_owner": "'w-next'",
        "lease_token": f"'{token}'",
        "lease_proof": f"'p:{token}'",
        "lease_expires_at_ms": str(now_ms + LEASE_MS),
        "eligible_at_ms": str(now_ms + LEASE_MS),
        "updated_at_ms": str(now_ms),
    }


def renew(expires_at_ms: int) -> Sets:
    """A renew as the store writes it: a leased row stays due when its lease expires."""
    return {
        "version": "version + 1",
        "lease_expires_at_ms": str(expires_at_ms),
        "eligible_at_ms": f"CASE WHEN status = 'leased' THEN {expires_at_ms} END",
    }


def set_list(sets: Sets, dialect: str) -> str:
    """The SET list of an UPDATE in `dialect`."""
    if dialect != "postgres":
        sets = {column: value for column, value in sets.items() if column != "lease_proof"}
    return ", ".join(f"{column} = {value}" for column, value in sets.items())


async def executions_in(
    h: Harness, clock: ManualClock, wanted: list[ExecutionStatus], *, max_attempts: int = 5
) -> list[str]:
    """One fresh execution per entry of `wanted`, walked there by allowed raw changes."""
    consumed = await submit_runs(h.approver_store, clock, len(wanted), max_attempts=max_attempts)
    ids = [c.dispatch_id for c in consumed]
    table = faults.table(h, EXECUTIONS)
    for step in range(max(len(path) for path in EXECUTION_PATHS.values())):
        moves: dict[tuple[ExecutionStatus, ExecutionStatus], list[str]] = {}
        for dispatch_id, status in zip(ids, wanted, strict=True):
            path = (E.PENDING, *EXECUTION_PATHS[status])
            if step + 1 < len(path):
                moves.setdefault((path[step], path[step + 1]), []).append(dispatch_id)
        for (before, after), group in moves.items():
            move = execution_move(before, after, clock.now_ms())
            where = f"dispatch_id IN {in_list(group)}"
            audit = cancel_audit(h, where) if after is E.CANCELLED else None
            await raw_after(
                h, audit, f"UPDATE {table} SET {set_list(move, h.dialect)} WHERE {where}"
            )
    rows = await h.raw(
        f"SELECT dispatch_id, status FROM {table} WHERE dispatch_id IN {in_list(ids)}"
    )
    assert {r["dispatch_id"]: r["status"] for r in rows} == {
        dispatch_id: status.value for dispatch_id, status in zip(ids, wanted, strict=True)
    }
    return ids


async def execution_in(h: Harness, clock: ManualClock, status: ExecutionStatus) -> str:
    """One fresh execution in `status`."""
    (dispatch_id,) = await executions_in(h, clock, [status])
    return dispatch_id


async def update_execution(h: Harness, dispatch_id: str, sets: Sets) -> str | None:
    """The rule that refuses `sets` on the row, or None when they were applied (as the lease's
    holder, unless `sets` says otherwise: the state machine is what is tested here)."""
    sets = {"lease_proof": "'p:' || lease_token"} | sets
    where = f"dispatch_id = '{dispatch_id}'"
    return await refusal(
        h,
        f"UPDATE {faults.table(h, EXECUTIONS)} SET {set_list(sets, h.dialect)} "
        f"WHERE {where} RETURNING version",
        first=cancel_audit(h, where) if sets.get("status") == f"'{E.CANCELLED}'" else None,
    )


def step_move(after: steps.StepRunStatus, now_ms: int) -> Sets:
    """A StepRun change to `after` as `advance_step_run` writes it (version + 1)."""
    return {
        "status": f"'{after}'",
        "version": "version + 1",
        "result_code": "'test'" if after in (S.SUCCEEDED, S.FAILED, S.LOST) else "result_code",
        "updated_at_ms": str(now_ms),
    }


def new_step_run(
    step_run_id: str, run_id: str, status: steps.StepRunStatus, approval: str | None, now_ms: int
) -> dict[str, object]:
    """A StepRun row as `insert_step_run` writes it (digests are not what is tested here)."""
    return {
        "step_run_id": step_run_id,
        "run_id": run_id,
        "project_id": "proj-1",
        "step_kind": "tool",
        "tool_id": "builtin.file.write",
        "tool_version": 1,
        "definition_digest": "d" * 64,
        "action_type": "tool.invoke",
        "action_ref": f"act-{step_run_id}",
        "action_digest": "a" * 64,
        "approval_request_id": approval,
        "binding_digest": "b" * 64,
        "status": status.value,
        "version": 1,
        "result_code": None,
        "created_at_ms": now_ms,
        "updated_at_ms": now_ms,
    }


async def step_runs_in(
    h: Harness, clock: ManualClock, wanted: list[steps.StepRunStatus]
) -> list[str]:
    """One fresh StepRun per entry of `wanted` under one live Run, walked there by raw SQL."""
    run = await tools.live_run(h, clock)
    waiting = sum(status is S.WAITING_APPROVAL for status in wanted)
    approvals = iter(
        [c.approval_request_id for c in await submit_runs(h.approver_store, clock, waiting)]
        if waiting
        else []
    )
    table = faults.table(h, "step_runs")
    ids = [f"s-{i}-{status}" for i, status in enumerate(wanted)]
    for step_run_id, status in zip(ids, wanted, strict=True):
        first = S.WAITING_APPROVAL if status is S.WAITING_APPROVAL else S.READY
        approval = next(approvals) if first is S.WAITING_APPROVAL else None
        row = new_step_run(step_run_id, run.run_id, first, approval, clock.now_ms())
        await recovery.insert_row(h, "step_runs", row)
        for after in STEP_PATHS[status]:
            await h.raw(
                f"UPDATE {table} SET {set_list(step_move(after, clock.now_ms()), h.dialect)} "
                f"WHERE step_run_id = '{step_run_id}'"
            )
    return ids


async def update_step_run(h: Harness, step_run_id: str, sets: Sets) -> str | None:
    """The rule that refuses `sets` on the StepRun, or None when they were applied."""
    return await refusal(
        h,
        f"UPDATE {faults.table(h, 'step_runs')} SET {set_list(sets, h.dialect)} "
        f"WHERE step_run_id = '{step_run_id}' RETURNING version",
    )
