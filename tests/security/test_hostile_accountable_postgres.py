"""Accountable changes, attacked on PostgreSQL from plain logins of this session, each holding
only the role the docs give it (docs/security.md): a claim that leaves its row due under a
live lease, an operator's block or cancel or manual settlement without its audit row, and a
Run or receipt written without the holder's lease proof.

Every attack asserts the database's own refusal (its SQLSTATE) and that nothing changed;
where the product's own shape of the same change is admitted, the test runs it too, so a
refusal is the rule's and not a typo's.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.domain import ids, runs
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import holders, insert_row, request_for, started_execution

pytestmark = pytest.mark.postgres

EXECUTIONS = "qinglong.approved_action_dispatch_executions"
RUNTIME = stores.session_login("acc_runtime")
OPERATOR = stores.session_login("acc_operator")


@pytest.fixture
async def logins(pg: stores.Harness) -> tuple[str, str]:
    """(runtime url, operator url): logins of their own, each in one documented role only."""
    await stores.create_login(RUNTIME, "qinglong_runtime")
    await stores.create_login(OPERATOR, "qinglong_operator")
    database = str(await pg.scalar("SELECT current_database()"))
    return (
        stores.pg_url(database, login=RUNTIME),
        stores.pg_url(database, login=OPERATOR),
    )


@pytest.fixture
def now() -> ManualClock:
    """The real clock, where a lease must be live on the database's clock."""
    return ManualClock(int(time.time() * 1000))


async def _attempt(url: str, *statements: tuple[Any, ...]) -> str | None:
    """Run `statements` ((sql, *args) each) in one transaction as `url`'s login: the SQLSTATE
    the database refused it with, or None when it committed."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            for sql, *args in statements:
                await conn.execute(sql, *args)
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate)
    finally:
        await conn.close()
    return None


async def _snapshot(pg: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """Everything these attacks could change."""
    row = await pg.raw(f"SELECT * FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch_id}'")
    counts = await pg.raw(
        "SELECT (SELECT count(*) FROM qinglong.execution_events) AS events, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit, "
        "(SELECT count(*) FROM qinglong.recovery_resolutions) AS resolutions, "
        "(SELECT count(*) FROM qinglong.approved_run_action_receipts) AS receipts, "
        "(SELECT count(*) FROM qinglong.runs) AS runs"
    )
    return row[0], counts[0]


# -- a leased row is due when its lease expires ---------------------------------------------


@pytest.mark.parametrize("due", ["past", "after_expiry"])
async def test_a_claim_that_leaves_its_row_due_under_a_live_lease_is_refused(
    pg: stores.Harness, logins: tuple[str, str], now: ManualClock, due: str
) -> None:
    runtime, _ = logins
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    expires = now.ms + 3_600_000
    eligible = 1 if due == "past" else expires + 3_600_000
    claim = (
        f"UPDATE {EXECUTIONS} SET status = 'leased', version = version + 1, "
        "attempt = attempt + 1, lease_owner = 'w-x', lease_token = 't-x', lease_proof = 'p-x', "
        "lease_expires_at_ms = $2, eligible_at_ms = $3 WHERE dispatch_id = $1"
    )
    before = await _snapshot(pg, consumed.dispatch_id)
    assert await _attempt(runtime, (claim, consumed.dispatch_id, expires, eligible)) == "QLT01"
    assert await _snapshot(pg, consumed.dispatch_id) == before
    # The shape every claim of the product writes: due exactly when the lease expires.
    assert await _attempt(runtime, (claim, consumed.dispatch_id, expires, expires)) is None


# -- an operator's change is audited, a block is the runtime's -------------------------------


@pytest.mark.parametrize("result_code", ["attempts_exhausted", "operator_blocked"])
async def test_nobody_blocks_a_waiting_dispatch_whose_budget_is_not_spent(
    pg: stores.Harness, logins: tuple[str, str], now: ManualClock, result_code: str
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    before = await _snapshot(pg, consumed.dispatch_id)
    block = (
        f"UPDATE {EXECUTIONS} SET status = 'blocked', version = version + 1, "
        "eligible_at_ms = NULL, result_mutation_id = 'm-x', result_code = $2, "
        "completed_at_ms = 1, updated_at_ms = 1 WHERE dispatch_id = $1"
    )
    for url in logins:  # the runtime too: a budget that is not spent blocks nothing
        assert await _attempt(url, (block, consumed.dispatch_id, result_code)) == "QLT01"
    assert await _snapshot(pg, consumed.dispatch_id) == before


async def test_an_operator_cannot_block_a_dispatch_whose_budget_is_spent(
    pg: stores.Harness, logins: tuple[str, str], now: ManualClock
) -> None:
    # One attempt allowed, taken, and its lease expired: the daemon would block it with the
    # product's code; an operator imitating that code is still refused.
    await submit_runs(pg.approver_store, now, 1, max_attempts=1)
    batch = await pg.store.claim_due(now_ms=now.ms, owner="w1", limit=1, lease_ms=1)
    (claim,) = batch.claimed
    await anyio.sleep(0.01)  # the one-millisecond lease expires on the database clock
    _, operator = logins
    before = await _snapshot(pg, claim.dispatch_id)
    state = await _attempt(
        operator,
        (
            f"UPDATE {EXECUTIONS} SET status = 'blocked', version = version + 1, "
            "eligible_at_ms = NULL, result_mutation_id = 'm-x', "
            "result_code = 'attempts_exhausted', completed_at_ms = 1, updated_at_ms = 1 "
            "WHERE dispatch_id = $1",
            claim.dispatch_id,
        ),
    )
    assert state == "QLT01"
    assert await _snapshot(pg, claim.dispatch_id) == before


_CANCEL = (
    f"UPDATE {EXECUTIONS} SET status = 'cancelled', version = version + 1, "
    "eligible_at_ms = NULL, retry_at_ms = NULL, result_mutation_id = $1 || ':cancel', "
    "result_code = 'operator_said', completed_at_ms = 1, updated_at_ms = 1 "
    "WHERE dispatch_id = $1"
)
_AUDIT = (
    "INSERT INTO qinglong.security_audit_events (kind, actor, principal, project_id, "
    "subject_id, detail_code, committed_at_ms) VALUES ($2, 'oncall', session_user, 'proj-1', "
    "$1, $3, 0)"
)


@pytest.mark.parametrize("audit", ["none", "earlier_transaction", "other_code", "after"])
async def test_an_operator_cannot_cancel_without_its_audit_row_first(
    pg: stores.Harness, logins: tuple[str, str], now: ManualClock, audit: str
) -> None:
    _, operator = logins
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    dispatch_id = consumed.dispatch_id
    mine = (_AUDIT, dispatch_id, "dispatch.cancelled", "pending:operator_said")
    if audit == "earlier_transaction":
        assert await _attempt(operator, mine) is None
        await anyio.sleep(0.01)  # a later transaction, on another millisecond
    before = await _snapshot(pg, dispatch_id)
    attacks: dict[str, list[tuple[Any, ...]]] = {
        "none": [(_CANCEL, dispatch_id)],
        "earlier_transaction": [(_CANCEL, dispatch_id)],
        "other_code": [
            (_AUDIT, dispatch_id, "dispatch.cancelled", "pending:x"),
            (_CANCEL, dispatch_id),
        ],
        "after": [(_CANCEL, dispatch_id), mine],
    }
    assert await _attempt(operator, *attacks[audit]) == "QLI02"
    assert await _snapshot(pg, dispatch_id) == before
    # The product's shape: its audit row first, in the same transaction.
    assert await _attempt(operator, mine, (_CANCEL, dispatch_id)) is None
    row = await pg.raw(
        "SELECT principal FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{dispatch_id}' AND kind = 'dispatch.cancelled' "
        "ORDER BY event_id DESC LIMIT 1"
    )
    assert row == [{"principal": OPERATOR}]


async def test_an_operator_cannot_settle_by_a_manual_resolution_without_its_audit_row(
    pg: stores.Harness, logins: tuple[str, str], clock: ManualClock
) -> None:
    # The manual clock lies in the past: the lease it grants has expired on the database's.
    _, operator = logins
    await submit_runs(pg.approver_store, clock, 1)
    dispatch, fence = await started_execution(pg, clock)
    resolution = (
        "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, resolution, "
        "resolved_by, principal, reason_code, execution_attempt, execution_version, "
        "lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
        "($1, 'manual', 'failed', 'oncall', session_user, 'checked', $2, $3, $4, $5, $6, 0)",
        dispatch.dispatch_id,
        fence.attempt,
        fence.version,
        fence.owner,
        fence.token,
        fence.started_at_ms,
    )
    settle = (
        f"UPDATE {EXECUTIONS} SET status = 'failed', version = version + 1, "
        "result_mutation_id = $1 || ':recovery', result_code = 'checked', "
        "completed_at_ms = 1, updated_at_ms = 1 WHERE dispatch_id = $1",
        dispatch.dispatch_id,
    )
    audit = (_AUDIT, dispatch.dispatch_id, "recovery.manual_resolution", "failed:checked")
    before = await _snapshot(pg, dispatch.dispatch_id)
    assert await _attempt(operator, resolution, settle) == "QLI02"
    assert await _attempt(operator, resolution, settle, audit) == "QLI02"
    assert await _snapshot(pg, dispatch.dispatch_id) == before
    assert await _attempt(operator, resolution, audit, settle) is None


# -- Runs and receipts need the holder's proof -----------------------------------------------


@pytest.mark.parametrize("proof", [None, "'guessed'", "lease_token", "lease_proof_digest"])
async def test_the_runtime_login_cannot_write_a_run_or_receipt_for_another_holders_row(
    pg: stores.Harness, logins: tuple[str, str], now: ManualClock, proof: str | None
) -> None:
    runtime, _ = logins
    await submit_runs(pg.approver_store, now, 1)
    dispatch, fence = await started_execution(pg, now)
    request = await request_for(pg, now, dispatch, fence, run_id="r-forged")
    # Nothing, a guess, or what the login can read of the row: its token, its proof's digest.
    presented = proof or "NULL"
    if proof in ("lease_token", "lease_proof_digest"):
        presented = (
            f"(SELECT {proof} FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch.dispatch_id}')"
        )
    run = runs.run_row(request.run) | {"updated_at_ms": request.run.created_at_ms}
    receipt = runs.receipt_row(
        runs.receipt_for(
            dispatch=dispatch,
            attempt=fence.attempt,
            execution_version=fence.version,
            started_at_ms=fence.started_at_ms,
            run_id="r-forged",
            created_at_ms=now.ms,
        )
    )
    before = await _snapshot(pg, dispatch.dispatch_id)
    assert await _attempt(runtime, (_insert("runs", run, presented),)) == "QLF01"
    assert await _snapshot(pg, dispatch.dispatch_id) == before
    # The holder's Run is there (it presented its proof); a receipt still needs the proof.
    await insert_row(pg, "runs", holders(pg, run, fence.token))
    before = await _snapshot(pg, dispatch.dispatch_id)
    state = await _attempt(runtime, (_insert("approved_run_action_receipts", receipt, presented),))
    assert state == "QLF01"
    assert await _snapshot(pg, dispatch.dispatch_id) == before
    # The same receipt with the holder's proof is the database's to accept.
    receipt_sql = _insert(
        "approved_run_action_receipts", receipt, f"'{ids.lease_proof(fence.token)}'"
    )
    assert await _attempt(runtime, (receipt_sql,)) is None


def _insert(table: str, row: dict[str, Any], proof_sql: str) -> str:
    """An INSERT of `row` presenting `proof_sql` as its lease proof (test-controlled values)."""
    columns = ", ".join([*row, "lease_proof"])
    values = ", ".join([*(_literal(v) for v in row.values()), proof_sql])
    return f"INSERT INTO qinglong.{table} ({columns}) VALUES ({values})"


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"
