"""PostgreSQL's two run.create paths: the one-statement happy path and the shared transaction.

The contract suite checks what either path writes; these check which path a case takes, so
neither can silently stop being exercised (a dead fast path would otherwise pass everything).
"""

from __future__ import annotations

import dataclasses

import pytest

from qinglong_dispatcher import ports
from tests.support import pg_paths, repositories, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import request_for, started_execution

pytestmark = pytest.mark.postgres

Paths = pg_paths.Paths


@pytest.fixture
def paths(pg: stores.Harness, monkeypatch: pytest.MonkeyPatch) -> Paths:
    return pg_paths.spy(pg, monkeypatch)


async def test_the_happy_path_is_one_statement_and_a_replay_the_shared_transaction(
    pg: stores.Harness, clock: ManualClock, paths: Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    dispatch, identity = await started_execution(pg, clock)
    request = await request_for(pg, clock, dispatch, identity)
    paths.statements.clear()
    paths.transactions = 0
    first = await repositories.runs(pg.store).create_run(request)
    assert first.outcome is ports.RunCreateOutcome.CREATED
    assert (paths.statements, paths.transactions) == ([True], 0)
    again = await repositories.runs(pg.store).create_run(request)
    assert again.outcome is ports.RunCreateOutcome.EXISTING
    assert (paths.statements, paths.transactions) == ([True, False], 1)
    assert again.receipt == first.receipt


async def test_a_renewed_version_skips_the_fast_path_and_creates_in_the_shared_transaction(
    pg: stores.Harness, clock: ManualClock, paths: Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    dispatch, identity = await started_execution(pg, clock)
    renewal = await pg.store.renew(identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert renewal.lease is not None
    request = await request_for(pg, clock, dispatch, identity)
    paths.statements.clear()
    paths.transactions = 0
    result = await repositories.runs(pg.store).create_run(request)
    assert result.outcome is ports.RunCreateOutcome.CREATED
    assert result.receipt is not None
    assert result.receipt.execution_version == renewal.lease.version
    assert (paths.statements, paths.transactions) == ([False], 1)


async def test_the_fast_path_writes_nothing_for_a_forged_token(
    pg: stores.Harness, clock: ManualClock, paths: Paths
) -> None:
    await submit_runs(pg.approver_store, clock, 1)
    dispatch, identity = await started_execution(pg, clock)
    forged = dataclasses.replace(identity, token="t-forged")
    request = await request_for(pg, clock, dispatch, forged)
    paths.statements.clear()
    paths.transactions = 0
    result = await repositories.runs(pg.store).create_run(request)
    assert (result.outcome, result.reason) == (
        ports.RunCreateOutcome.FENCED,
        "identity_mismatch",
    )
    assert (paths.statements, paths.transactions) == ([False], 1)
    assert await pg.scalar("SELECT count(*) AS n FROM qinglong.runs") == 0
