"""PostgreSQL's two start barriers: the one-statement happy path and the shared transaction.

`PostgresStore.start` tries `fast_paths.start_fast` for one item and falls back to
`adapters/sql/executions.start` for anything else. The contract suite checks what a start
writes; these check which path each case takes, and that both write the same row and event.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import pg_paths, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import claim_one, start_request

pytestmark = pytest.mark.postgres

WALL_SLACK_MS = 60_000
"""Ledger times come from the database clock, however far the manual clock is."""


@pytest.fixture
def paths(pg: stores.Harness, monkeypatch: pytest.MonkeyPatch) -> pg_paths.Paths:
    return pg_paths.spy(pg, monkeypatch)


async def start(
    pg: stores.Harness, clock: ManualClock, *requests: records.StartRequest
) -> list[records.StartResult]:
    return await pg.store.start(list(requests), now_ms=clock.now_ms(), lease_ms=LEASE_MS)


async def ledger(pg: stores.Harness, dispatch_id: str) -> list[dict[str, Any]]:
    return await pg.raw(
        "SELECT * FROM qinglong.execution_events "
        f"WHERE dispatch_id = '{dispatch_id}' ORDER BY version"
    )


async def test_the_happy_single_start_is_one_statement_and_a_replay_the_shared_transaction(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    claim = await claim_one(pg, clock)
    paths.clear()
    (first,) = await start(pg, clock, start_request(claim))
    assert first.outcome is Outcome.STARTED
    assert paths.seen == ([True], 0)
    clock.advance(ms=5)
    (again,) = await start(pg, clock, start_request(claim))
    assert again.outcome is Outcome.REPLAYED
    assert again.identity == first.identity
    assert paths.seen == ([True, False], 1)
    events = await ledger(pg, claim.dispatch_id)
    assert [e["to_status"] for e in events].count("executing") == 1


@pytest.mark.parametrize(
    ("case", "outcome", "reason"),
    [
        ("approval", Outcome.CONFLICT, "approval_mismatch"),
        ("digest", Outcome.CONFLICT, "digest_mismatch"),
        ("token", Outcome.CONFLICT, "lease_lost"),
        ("version", Outcome.CONFLICT, "stale_version"),
        ("expired", Outcome.EXPIRED, "lease_expired"),
    ],
)
async def test_a_refusal_misses_the_fast_path_and_the_shared_transaction_decides(
    pg: stores.Harness,
    clock: ManualClock,
    paths: pg_paths.Paths,
    case: str,
    outcome: Outcome,
    reason: str,
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    claim = await claim_one(pg, clock)
    assert claim.lease is not None
    lease = claim.lease
    request = {
        "approval": start_request(claim, approval_request_id="a-other"),
        "digest": start_request(claim, action_digest="0" * 64),
        "token": start_request(claim, lease=dataclasses.replace(lease, token="t-x")),
        "version": start_request(claim, lease=dataclasses.replace(lease, version=7)),
        "expired": start_request(claim),
    }[case]
    if case == "expired":
        clock.advance(ms=LEASE_MS)
    row_before = await pg.raw(
        "SELECT * FROM qinglong.approved_action_dispatch_executions "
        f"WHERE dispatch_id = '{claim.dispatch_id}'"
    )
    events_before = await ledger(pg, claim.dispatch_id)
    paths.clear()
    (result,) = await start(pg, clock, request)
    assert (result.outcome, result.reason, result.identity) == (outcome, reason, None)
    assert paths.seen == ([False], 1)
    assert (
        await pg.raw(
            "SELECT * FROM qinglong.approved_action_dispatch_executions "
            f"WHERE dispatch_id = '{claim.dispatch_id}'"
        )
        == row_before
    )
    assert await ledger(pg, claim.dispatch_id) == events_before


async def test_several_items_skip_the_fast_path_for_one_shared_transaction(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 2)
    batch = await pg.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=2, lease_ms=LEASE_MS)
    first, second = batch.claimed
    paths.clear()
    results = await start(pg, clock, start_request(first), start_request(second))
    assert [r.outcome for r in results] == [Outcome.STARTED, Outcome.STARTED]
    assert paths.seen == ([], 1)


def _shape(row: dict[str, Any], token: str) -> dict[str, Any]:
    """A row or event without what names its own dispatch (checked apart) or commit time."""
    assert row["lease_token"] == token
    return {
        k: v
        for k, v in row.items()
        if k
        not in ("dispatch_id", "lease_token", "lease_proof_digest", "event_id", "committed_at_ms")
    }


async def test_both_paths_leave_identical_rows_and_ledger_events(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 2)
    batch = await pg.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=2, lease_ms=LEASE_MS)
    fast, shared = batch.claimed
    assert fast.lease is not None
    assert shared.lease is not None
    clock.advance(ms=7)
    wall_from = int(time.time() * 1000)
    paths.clear()
    (by_statement,) = await start(pg, clock, start_request(fast))
    assert paths.seen == ([True], 0)
    # The same one item through the shared transaction, as the fast path falls back to it.
    assert isinstance(pg.store, sql_store.SqlStore)
    (by_transaction,) = await sql_store.SqlStore.start(
        pg.store, [start_request(shared)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert paths.seen == ([True], 1)
    wall_to = int(time.time() * 1000)
    assert by_statement.outcome is by_transaction.outcome is Outcome.STARTED
    assert by_statement.identity is not None
    assert by_transaction.identity is not None
    assert dataclasses.replace(by_statement.identity, dispatch_id="d", token="t") == (
        dataclasses.replace(by_transaction.identity, dispatch_id="d", token="t")
    )
    rows = {
        claim.dispatch_id: (
            await pg.raw(
                "SELECT * FROM qinglong.approved_action_dispatch_executions "
                f"WHERE dispatch_id = '{claim.dispatch_id}'"
            )
        )[0]
        for claim in (fast, shared)
    }
    assert _shape(rows[fast.dispatch_id], fast.lease.token) == _shape(
        rows[shared.dispatch_id], shared.lease.token
    )
    assert rows[fast.dispatch_id]["status"] == ExecutionStatus.EXECUTING.value
    assert rows[fast.dispatch_id]["started_at_ms"] == clock.now_ms()
    fast_events = await ledger(pg, fast.dispatch_id)
    shared_events = await ledger(pg, shared.dispatch_id)
    assert [_shape(e, fast.lease.token) for e in fast_events[1:]] == [
        _shape(e, shared.lease.token) for e in shared_events[1:]
    ]
    for events in (fast_events, shared_events):
        assert (events[-1]["from_status"], events[-1]["to_status"]) == ("leased", "executing")
        assert wall_from - WALL_SLACK_MS <= events[-1]["committed_at_ms"] <= wall_to + 1_000
