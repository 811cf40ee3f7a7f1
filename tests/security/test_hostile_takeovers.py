"""Takeovers and handler waits against a plain runtime login (PostgreSQL).

A takeover refunds the dead holder's attempt and counts apart; the database admits exactly
that move, the block of a spent takeover bound, and the wake of a handler wait, and nothing
looser. Each attack asserts the SQLSTATE and that nothing changed.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.domain import fencing, states
from tests.support import refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

EXECUTIONS = "qinglong.approved_action_dispatch_executions"
SHORT_LEASE_MS = 50


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these leases as they are."""
    return ManualClock(int(time.time() * 1000))


async def _runtime(pg: stores.Harness) -> str:
    return stores.runtime_url(str(await pg.scalar("SELECT current_database()")))


async def _snapshot(pg: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    row = await pg.raw(f"SELECT * FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch_id}'")
    events = await pg.raw(
        f"SELECT count(*) AS n FROM qinglong.execution_events WHERE dispatch_id = '{dispatch_id}'"
    )
    return row[0], events[0]


async def _expired_lease(pg: stores.Harness, now: ManualClock, *, max_attempts: int = 5) -> str:
    """A row claimed by another owner whose lease has expired on the database clock."""
    (consumed,) = await submit_runs(pg.approver_store, now, 1, max_attempts=max_attempts)
    batch = await pg.store.claim_due(now_ms=now.ms, owner="dead", limit=1, lease_ms=SHORT_LEASE_MS)
    assert [c.outcome for c in batch.claims] == ["claimed"]
    await anyio.sleep(SHORT_LEASE_MS * 3 / 1000)
    return consumed.dispatch_id


_TAKEOVER = (
    f"UPDATE {EXECUTIONS} SET version = version + 1, lease_owner = 'thief', "
    "lease_token = 'mine', lease_proof = 'mine', lease_expires_at_ms = lease_expires_at_ms, "
)


async def test_a_takeover_that_does_not_count_as_one_is_refused(
    pg: stores.Harness, now: ManualClock
) -> None:
    dispatch_id = await _expired_lease(pg, now)
    runtime = await _runtime(pg)
    before = await _snapshot(pg, dispatch_id)
    for sets in (
        "attempt = attempt + 1",  # spending the budget, as a takeover once did
        "attempt = attempt + 1, takeovers = takeovers + 1",
        "takeovers = takeovers",  # not counted: endless takeovers of a poison pill
        "takeovers = takeovers + 2",
        "attempt = attempt - 1, takeovers = takeovers + 1",
    ):
        state = await refusals.sqlstate_as(
            runtime, _TAKEOVER + sets + " WHERE dispatch_id = $1", dispatch_id
        )
        assert state == "QLT01", sets
        assert await _snapshot(pg, dispatch_id) == before
    # The one move it admits, for contrast: the same login takes the expired lease over.
    conn = await asyncpg.connect(runtime, timeout=5)
    try:
        await conn.execute(
            _TAKEOVER + "takeovers = takeovers + 1 WHERE dispatch_id = $1", dispatch_id
        )
    finally:
        await conn.close()
    row = await pg.raw(
        f"SELECT attempt, takeovers FROM {EXECUTIONS} WHERE dispatch_id = '{dispatch_id}'"
    )
    assert [dict(r) for r in row] == [{"attempt": 1, "takeovers": 1}]


async def test_the_takeover_count_is_neither_reset_nor_pushed_past_its_bound(
    pg: stores.Harness, now: ManualClock
) -> None:
    dispatch_id = await _expired_lease(pg, now, max_attempts=1)
    # One takeover by the store, which also dies: a count to reset.
    batch = await pg.store.claim_due(
        now_ms=int(time.time() * 1000), owner="dead-too", limit=1, lease_ms=SHORT_LEASE_MS
    )
    assert [c.taken_over is not None for c in batch.claimed] == [True]
    await anyio.sleep(SHORT_LEASE_MS * 3 / 1000)
    runtime = await _runtime(pg)
    bound = states.max_takeovers(1)
    before = await _snapshot(pg, dispatch_id)
    state = await refusals.sqlstate_as(
        runtime,
        _TAKEOVER + f"takeovers = {bound + 1} WHERE dispatch_id = $1",
        dispatch_id,
    )
    assert state == "QLT01"
    for sets, expected in (
        ("takeovers = 0", "QLT01"),
        ("takeovers = takeovers - 1", "QLT01"),
        # Counted on the same token: a takeover of the expired lease, which presents a proof.
        ("takeovers = takeovers + 1", "QLF01"),
    ):
        state = await refusals.sqlstate_as(
            runtime,
            f"UPDATE {EXECUTIONS} SET version = version + 1, {sets} WHERE dispatch_id = $1",
            dispatch_id,
        )
        assert state == expected, sets
    assert await _snapshot(pg, dispatch_id) == before


async def test_an_expired_lease_is_blocked_without_its_proof_only_past_the_takeover_bound(
    pg: stores.Harness, now: ManualClock
) -> None:
    # max_attempts 1 at attempt 1: the budget rule that once let anyone block it is gone.
    dispatch_id = await _expired_lease(pg, now, max_attempts=1)
    runtime = await _runtime(pg)
    before = await _snapshot(pg, dispatch_id)
    # Below the bound, the state machine refuses it as the holder's move (QLF01); with the
    # budget's code, the accountable guard answers first: only a spent takeover bound blocks
    # an expired lease (QLT01).
    for code, expected in (("takeovers_exhausted", "QLF01"), ("attempts_exhausted", "QLT01")):
        state = await refusals.sqlstate_as(
            runtime,
            f"UPDATE {EXECUTIONS} SET status = 'blocked', version = version + 1, "
            f"eligible_at_ms = NULL, result_code = '{code}', completed_at_ms = 1 "
            "WHERE dispatch_id = $1",
            dispatch_id,
        )
        assert state == expected, code
    assert await _snapshot(pg, dispatch_id) == before


async def test_only_a_handler_wait_is_made_due_earlier_and_nothing_else_moves(
    pg: stores.Harness, now: ManualClock
) -> None:
    waiting, yielded = await submit_runs(pg.approver_store, now, 2)
    batch = await pg.store.claim_due(now_ms=now.ms, owner="w1", limit=2, lease_ms=60_000)
    for claim, code in zip(batch.claimed, ("handler_missing", "shutdown"), strict=True):
        assert claim.lease is not None
        await pg.store.release_preflight(
            claim.lease,
            mutation_id=fencing.release_mutation_id(claim.lease),
            kind=states.ReleaseKind.WAIT,
            result_code=code,
            retry_at_ms=now.ms + 60_000,
            now_ms=now.ms,
        )
    by_code = {c.dispatch_id: c for c in batch.claimed}
    handler_wait, other = batch.claimed[0].dispatch_id, batch.claimed[1].dispatch_id
    assert set(by_code) == {waiting.dispatch_id, yielded.dispatch_id}
    runtime = await _runtime(pg)
    earlier = f"UPDATE {EXECUTIONS} SET version = version + 1, eligible_at_ms = {now.ms}"
    before = await _snapshot(pg, other)
    assert (
        await refusals.sqlstate_as(runtime, earlier + " WHERE dispatch_id = $1", other) == "QLT01"
    )
    assert await _snapshot(pg, other) == before
    before = await _snapshot(pg, handler_wait)
    for sets in (
        ", result_code = NULL",
        ", attempt = attempt + 1",
        ", takeovers = takeovers + 1",
        ", lease_owner = 'thief'",
    ):
        state = await refusals.sqlstate_as(
            runtime, earlier + sets + " WHERE dispatch_id = $1", handler_wait
        )
        assert state == "QLT01", sets
    later = f"UPDATE {EXECUTIONS} SET version = version + 1, eligible_at_ms = eligible_at_ms + 1"
    assert (
        await refusals.sqlstate_as(runtime, later + " WHERE dispatch_id = $1", handler_wait)
        == "QLT01"
    )
    assert await _snapshot(pg, handler_wait) == before
