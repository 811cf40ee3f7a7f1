"""The evidence of uncertain outcomes, attacked on PostgreSQL from plain logins of this session,
each holding only the role the docs give it (docs/security.md): what the daemon knew is
written only by the holder of the started row with its proof, and never changed or deleted
by anyone; the ledger's `recovery_required` mark is written by the database alone.

Every attack asserts the database's own refusal (its SQLSTATE) and that nothing changed; the
product's own shape of the write is admitted, so a refusal is the rule's and not a typo's.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.domain import ids
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

pytestmark = pytest.mark.postgres

EXECUTIONS = "qinglong.approved_action_dispatch_executions"
OUTCOMES = "qinglong.uncertain_outcomes"
MARKS = "qinglong.recovery_required_marks"
RUNTIME = stores.session_login("ev_runtime")
OPERATOR = stores.session_login("ev_operator")
VIEWER = stores.session_login("ev_viewer")


@pytest.fixture
async def logins(pg: stores.Harness) -> dict[str, str]:
    """A url per documented role, each login in that role only."""
    await stores.create_login(RUNTIME, "qinglong_runtime")
    await stores.create_login(OPERATOR, "qinglong_operator")
    await stores.create_login(VIEWER, "qinglong_viewer")
    database = str(await pg.scalar("SELECT current_database()"))
    return {
        "runtime": stores.pg_url(database, login=RUNTIME),
        "operator": stores.pg_url(database, login=OPERATOR),
        "viewer": stores.pg_url(database, login=VIEWER),
    }


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the started row's lease is live on the database's clock."""
    return ManualClock(int(time.time() * 1000))


async def _attempt(url: str, sql: str) -> str | None:
    """Run `sql` as `url`'s login: the SQLSTATE it was refused with, or None."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(sql)
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate)
    finally:
        await conn.close()
    return None


async def _everything(pg: stores.Harness) -> tuple[Any, ...]:
    return (
        await pg.raw(f"SELECT * FROM {OUTCOMES} ORDER BY dispatch_id"),
        await pg.raw(f"SELECT * FROM {MARKS} ORDER BY dispatch_id"),
        await pg.raw(f"SELECT * FROM {EXECUTIONS} ORDER BY dispatch_id"),
    )


def _outcome(dispatch_id: str, owner: str, proof_sql: str, evidence: str = '{"exitCode":1}') -> str:
    return (
        f"INSERT INTO {OUTCOMES} (dispatch_id, execution_attempt, lease_owner, result_code, "
        f"evidence_json, recorded_at_ms, lease_proof) VALUES ('{dispatch_id}', 1, '{owner}', "
        f"'command_exit_uncertain', '{evidence}', 0, {proof_sql})"
    )


@pytest.mark.parametrize("proof", [None, "'guessed'", "lease_token", "lease_proof_digest"])
async def test_only_the_holder_with_its_proof_writes_what_it_knew(
    pg: stores.Harness, logins: dict[str, str], now: ManualClock, proof: str | None
) -> None:
    await submit_runs(pg.approver_store, now, 1)
    dispatch, fence = await started_execution(pg, now, owner="w1")
    presented = proof or "NULL"
    if proof in ("lease_token", "lease_proof_digest"):
        presented = (
            f"(SELECT {proof} FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch.dispatch_id}')"
        )
    before = await _everything(pg)
    forged = _outcome(dispatch.dispatch_id, "w1", presented, '{"exitCode":0}')
    assert await _attempt(logins["runtime"], forged) == "QLF01"
    assert await _everything(pg) == before
    # An operator or a viewer holds no INSERT at all, proof or not.
    real = _outcome(dispatch.dispatch_id, "w1", f"'{ids.lease_proof(fence.token)}'")
    assert await _attempt(logins["operator"], real) == "42501"
    assert await _attempt(logins["viewer"], real) == "42501"
    assert await _everything(pg) == before
    # The holder's own write, with its proof, is the database's to accept (and clears it).
    assert await _attempt(logins["runtime"], real) is None
    (row,) = await pg.raw(f"SELECT * FROM {OUTCOMES}")
    assert (row["lease_proof"], row["evidence_json"]) == (None, '{"exitCode":1}')
    assert row["recorded_at_ms"] > 0


async def test_what_the_daemon_knew_is_never_changed_or_deleted(
    pg: stores.Harness, logins: dict[str, str], now: ManualClock
) -> None:
    await submit_runs(pg.approver_store, now, 1)
    dispatch, fence = await started_execution(pg, now, owner="w1")
    real = _outcome(dispatch.dispatch_id, "w1", f"'{ids.lease_proof(fence.token)}'")
    assert await _attempt(logins["runtime"], real) is None
    before = await _everything(pg)
    where = f"WHERE dispatch_id = '{dispatch.dispatch_id}'"
    change = f"UPDATE {OUTCOMES} SET evidence_json = '{{\"exitCode\":0}}' {where}"
    for login in ("runtime", "operator", "viewer"):
        assert await _attempt(logins[login], change) == "42501", login
        assert await _attempt(logins[login], f"DELETE FROM {OUTCOMES} {where}") == "42501", login
    # Not even the schema's owner may rewrite it: the table refuses an update itself.
    with pytest.raises(asyncpg.PostgresError, match="immutable"):
        await pg.raw(change)
    # And a second write for the same row is the holder's replay, which keeps the first.
    again = _outcome(dispatch.dispatch_id, "w1", f"'{ids.lease_proof(fence.token)}'", "{}")
    assert await _attempt(logins["runtime"], again) == "23505"
    assert await _everything(pg) == before


async def test_nobody_writes_the_recovery_required_mark_but_the_database(
    pg: stores.Harness, logins: dict[str, str], now: ManualClock
) -> None:
    await submit_runs(pg.approver_store, now, 1)
    dispatch, _ = await started_execution(pg, now, owner="w1")
    before = await _everything(pg)
    mark = (
        f"INSERT INTO {MARKS} (dispatch_id, execution_attempt, execution_version, lease_owner, "
        f"lease_expires_at_ms, noticed_by, committed_at_ms) VALUES ('{dispatch.dispatch_id}', "
        "1, 3, 'w1', 0, 'recovery_pass', 0)"
    )
    for login in ("runtime", "operator", "viewer"):
        assert await _attempt(logins[login], mark) == "42501", login
        assert await _attempt(logins[login], f"DELETE FROM {MARKS}") == "42501", login
    assert await _everything(pg) == before
