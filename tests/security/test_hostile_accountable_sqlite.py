"""Accountable changes on an edge file, by a plain `sqlite3` connection (the file's owner is
the runtime and the operator at once, docs/security.md): the file keeps the shape of an
accountable history. A claim never leaves its row due under a live lease, a waiting row is
blocked only once its budget is spent, a cancel and a manual settlement need their audit row
first, and the dispatcher's Run of a dispatch is written only while the dispatch is held.

SQLite has no lease proof to check (one daemon owns the file) and no transaction identity:
PostgreSQL's side of these rules (tests/security/test_hostile_accountable_postgres.py) also
binds the proof, the principal and the transaction. Each test asserts the trigger's own
abort and that nothing changed, then runs the product's shape of the same change.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher.domain import runs
from tests.support import refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import insert_row, request_for, started_execution

TABLE = "approved_action_dispatch_executions"


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    return (
        await h.raw(f"SELECT * FROM {TABLE} ORDER BY dispatch_id"),
        await h.raw("SELECT * FROM execution_events ORDER BY event_id"),
        await h.raw("SELECT * FROM security_audit_events ORDER BY event_id"),
        await h.raw("SELECT * FROM recovery_resolutions"),
        await h.raw("SELECT * FROM runs"),
    )


@pytest.mark.parametrize("due", ["past", "after_expiry"])
async def test_a_claim_never_leaves_its_row_due_under_a_live_lease(
    edge: stores.Harness, clock: ManualClock, due: str
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    expires = clock.ms + 3_600_000
    eligible = 1 if due == "past" else expires + 3_600_000

    def claim(eligible_at_ms: int) -> str:
        return (
            f"UPDATE {TABLE} SET status = 'leased', version = version + 1, "
            "attempt = attempt + 1, lease_owner = 'w-x', lease_token = 't-x', "
            f"lease_expires_at_ms = {expires}, eligible_at_ms = {eligible_at_ms} "
            f"WHERE dispatch_id = '{consumed.dispatch_id}'"
        )

    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(edge, claim(eligible))
    assert message == "qinglong:transition_refused: due"
    assert await _snapshot(edge) == before
    await edge.raw(claim(expires))  # the product's shape


@pytest.mark.parametrize("result_code", ["attempts_exhausted", "operator_blocked"])
async def test_a_waiting_row_is_blocked_only_once_its_budget_is_spent(
    edge: stores.Harness, clock: ManualClock, result_code: str
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    message = await refusals.sqlite_abort(
        edge,
        f"UPDATE {TABLE} SET status = 'blocked', version = version + 1, eligible_at_ms = NULL, "
        f"result_mutation_id = 'm-x', result_code = '{result_code}', completed_at_ms = 1, "
        f"updated_at_ms = 1 WHERE dispatch_id = '{consumed.dispatch_id}'",
    )
    assert message == "qinglong:transition_refused: blocked"
    assert await _snapshot(edge) == before


def _audit(dispatch_id: str, kind: str, detail: str) -> str:
    return (
        "INSERT INTO security_audit_events (kind, actor, principal, project_id, subject_id, "
        f"detail_code, committed_at_ms) VALUES ('{kind}', 'oncall', 'me', 'proj-1', "
        f"'{dispatch_id}', '{detail}', 1)"
    )


async def test_a_cancel_needs_its_audit_row_first(edge: stores.Harness, clock: ManualClock) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    cancel = (
        f"UPDATE {TABLE} SET status = 'cancelled', version = version + 1, eligible_at_ms = NULL, "
        "retry_at_ms = NULL, result_mutation_id = 'm-c', result_code = 'operator_said', "
        f"completed_at_ms = 1, updated_at_ms = 1 WHERE dispatch_id = '{consumed.dispatch_id}'"
    )
    before = await _snapshot(edge)
    assert await refusals.sqlite_abort(edge, cancel) == "qinglong:transition_refused: unaudited"
    assert await _snapshot(edge) == before
    # An audit row for another change does not stand in for this one.
    await edge.raw(_audit(consumed.dispatch_id, "dispatch.cancelled", "pending:other_code"))
    before = await _snapshot(edge)
    assert await refusals.sqlite_abort(edge, cancel) == "qinglong:transition_refused: unaudited"
    assert await _snapshot(edge) == before
    await edge.raw(_audit(consumed.dispatch_id, "dispatch.cancelled", "pending:operator_said"))
    await edge.raw(cancel)


async def test_a_manual_settlement_needs_its_audit_row_first(
    edge: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(edge.approver_store, clock, 1)
    dispatch, fence = await started_execution(edge, clock)
    clock.advance(s=3600)  # the lease expired (the trigger reads the database's clock: later)
    await edge.raw(
        "INSERT INTO recovery_resolutions (dispatch_id, source, resolution, resolved_by, "
        "principal, reason_code, execution_attempt, execution_version, lease_owner, "
        f"lease_token, started_at_ms, committed_at_ms) VALUES ('{dispatch.dispatch_id}', "
        f"'manual', 'failed', 'oncall', 'me', 'checked', {fence.attempt}, {fence.version}, "
        f"'{fence.owner}', '{fence.token}', {fence.started_at_ms}, 1)"
    )
    settle = (
        f"UPDATE {TABLE} SET status = 'failed', version = version + 1, "
        "result_mutation_id = 'm-r', result_code = 'checked', completed_at_ms = 1, "
        f"updated_at_ms = 1 WHERE dispatch_id = '{dispatch.dispatch_id}'"
    )
    before = await _snapshot(edge)
    assert await refusals.sqlite_abort(edge, settle) == "qinglong:transition_refused: unaudited"
    assert await _snapshot(edge) == before
    await edge.raw(_audit(dispatch.dispatch_id, "recovery.manual_resolution", "failed:checked"))
    await edge.raw(settle)


async def test_the_dispatchers_run_of_a_dispatch_is_written_only_while_it_is_held(
    edge: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(edge.approver_store, clock, 2)
    dispatch, fence = await started_execution(edge, clock)  # one started, one pending
    (waiting,) = await edge.raw(f"SELECT dispatch_id FROM {TABLE} WHERE status = 'pending'")
    request = await request_for(edge, clock, dispatch, fence, run_id="r-x")
    run = runs.run_row(request.run) | {"updated_at_ms": request.run.created_at_ms}
    forged = run | {"run_id": "r-forged", "idempotency_key": waiting["dispatch_id"]}
    before = await _snapshot(edge)
    with pytest.raises(sqlite3.IntegrityError, match="a Run of a dispatch is written while"):
        await insert_row(edge, "runs", forged)
    assert await _snapshot(edge) == before
    await insert_row(edge, "runs", run)  # its own started dispatch's
