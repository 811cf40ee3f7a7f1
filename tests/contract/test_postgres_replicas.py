"""Several replicas (separate pools) over one PostgreSQL: nothing claimed or started twice."""

from __future__ import annotations

import collections
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import pytest

from qinglong_dispatcher import clock as system_clock
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

pytestmark = pytest.mark.postgres

REPLICAS = 4
DISPATCHES = 2_000
LEASE_MS = 30_000
UNFINISHED = (
    EffectiveStatus.PENDING,
    EffectiveStatus.LEASED,
    EffectiveStatus.RETRY_WAIT,
    EffectiveStatus.EXECUTING,
)


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


async def _replica(database: str) -> postgres_store.PostgresStore:
    # One pool per replica, sized like production (concurrency 8 + a few).
    return await stores.open_postgres(stores.runtime_url(database), max_size=12)


@pytest.mark.slow
async def test_four_replicas_race_over_two_thousand_run_creates(database: str) -> None:
    the_clock = system_clock.SystemClock()
    replicas = [await _replica(database) for _ in range(REPLICAS)]
    claims: collections.Counter[str] = collections.Counter()
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        await submit_runs_as_approver(database, the_clock, DISPATCHES)
        started = time.monotonic()

        async def replica_loop(index: int) -> None:
            store = replicas[index]
            the_dispatcher = make_dispatcher(
                store, the_clock, owner=f"replica-{index}", page_size=64, concurrency=8
            )
            while True:
                report = await the_dispatcher.dispatch_batch()
                claims.update(report.claims)
                outcomes.update(report.outcomes)
                if report.observed:
                    continue
                counts = await store.counts(now_ms=the_clock.now_ms())
                if not any(counts.executions[s] for s in UNFINISHED):
                    return
                await anyio.sleep(0.01)  # another replica still holds the last leases

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for index in range(REPLICAS):
                    tg.start_soon(replica_loop, index)
        elapsed = time.monotonic() - started
    finally:
        for store in replicas:
            await store.close()

    assert claims["claimed"] == DISPATCHES, claims
    assert outcomes["succeeded"] == DISPATCHES, outcomes
    scalar = _scalar(database)
    assert await scalar("SELECT count(*) FROM qinglong.runs") == DISPATCHES
    assert await scalar("SELECT count(*) FROM qinglong.approved_run_action_receipts") == DISPATCHES
    statuses = await stores.raw(
        database,
        "SELECT status, count(*) AS n FROM qinglong.approved_action_dispatch_executions "
        "GROUP BY status",
    )
    assert {r["status"]: r["n"] for r in statuses} == {"succeeded": DISPATCHES}
    # The history, not just the final state: exactly one start barrier per dispatch.
    starts = await stores.raw(
        database,
        "SELECT d.dispatch_id, count(e.event_id) FILTER (WHERE (e.from_status, e.to_status) IN "
        "(('leased', 'executing'), ('pending', 'succeeded'))) AS starts, count(e.event_id) FILTER "
        "(WHERE e.to_status = 'leased' OR e.from_status = 'pending' AND e.to_status = 'succeeded') "
        "AS leases "
        "FROM qinglong.approved_action_dispatches AS d "
        "LEFT JOIN qinglong.execution_events AS e ON e.dispatch_id = d.dispatch_id "
        "GROUP BY d.dispatch_id",
    )
    assert len(starts) == DISPATCHES
    assert {r["starts"] for r in starts} == {1}
    assert {r["leases"] for r in starts} == {1}
    owners = await scalar(
        "SELECT count(DISTINCT lease_owner) FROM qinglong.execution_events "
        "WHERE to_status = 'executing' OR from_status = 'pending' AND to_status = 'succeeded'"
    )
    assert owners >= 2  # the replicas really shared the work
    assert elapsed < 60


def _scalar(database: str) -> Callable[[str], Awaitable[Any]]:
    async def scalar(sql: str) -> Any:  # a database value: whatever the column holds
        rows = await stores.raw(database, sql)
        return next(iter(rows[0].values()))

    return scalar


async def _claim(
    store: postgres_store.PostgresStore, clock: ManualClock, owner: str
) -> records.Claim:
    batch = await store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=8, lease_ms=LEASE_MS)
    (claim,) = batch.claimed
    return claim


def _start_request(claim: records.Claim) -> records.StartRequest:
    assert claim.lease is not None
    assert claim.dispatch is not None
    return records.StartRequest(
        lease=claim.lease,
        approval_request_id=claim.dispatch.approval_request_id,
        action_digest=claim.dispatch.action_digest,
    )


async def test_an_expired_lease_is_taken_over_by_another_pool(
    database: str, clock: ManualClock
) -> None:
    one, two = await _replica(database), await _replica(database)
    try:
        (consumed,) = await submit_runs_as_approver(database, clock, 1)
        first = await _claim(one, clock, "replica-1")
        clock.advance(ms=LEASE_MS - 1)
        assert (
            await two.claim_due(
                now_ms=clock.now_ms(), owner="replica-2", limit=8, lease_ms=LEASE_MS
            )
        ).observed == 0
        clock.advance(ms=1)
        second = await _claim(two, clock, "replica-2")
        assert second.lease is not None
        assert first.lease is not None
        # A takeover keeps the attempt (the dead claim's is refunded); its token fences.
        assert (second.lease.attempt, second.lease.owner) == (1, "replica-2")
        assert second.lease.token != first.lease.token
        (stale,) = await one.start(
            [_start_request(first)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
        )
        assert (stale.outcome, stale.reason) == (Outcome.CONFLICT, "lease_lost")
        (fresh,) = await two.start(
            [_start_request(second)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
        )
        assert fresh.outcome is Outcome.STARTED
        events = await one.execution_events(consumed.dispatch_id)
        assert [(e.to_status, e.lease_owner) for e in events][1:] == [
            (ExecutionStatus.LEASED, "replica-1"),
            (ExecutionStatus.LEASED, "replica-2"),
            (ExecutionStatus.EXECUTING, "replica-2"),
        ]
    finally:
        await one.close()
        await two.close()


async def test_an_expired_executing_row_becomes_recovery_required_for_every_pool(
    database: str, clock: ManualClock
) -> None:
    one, two = await _replica(database), await _replica(database)
    try:
        (consumed,) = await submit_runs_as_approver(database, clock, 1)
        claim = await _claim(one, clock, "replica-1")
        (started,) = await one.start(
            [_start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
        )
        assert started.identity is not None
        clock.advance(ms=LEASE_MS)
        batch = await two.claim_due(
            now_ms=clock.now_ms(), owner="replica-2", limit=8, lease_ms=LEASE_MS
        )
        assert batch.observed == 0
        seen = await two.claim(
            consumed.dispatch_id,
            now_ms=clock.now_ms(),
            owner="replica-2",
            token="t2",
            lease_ms=LEASE_MS,
        )
        assert (seen.outcome, seen.reason) == (Outcome.NOT_CLAIMABLE, "started")
        for store in (one, two):
            counts = await store.counts(now_ms=clock.now_ms())
            assert counts.executions[EffectiveStatus.RECOVERY_REQUIRED] == 1
            assert counts.executions[EffectiveStatus.EXECUTING] == 0
        (listed,) = await two.list_recovery_required(now_ms=clock.now_ms(), limit=8)
        assert listed.fence == started.identity
        renewal = await one.renew(
            started.identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS
        )
        assert renewal.outcome is Outcome.EXPIRED
        # Its owner may still complete it under the fence (docs/state-machine.md).
        done = await one.complete(
            started.identity,
            mutation_id="late",
            completion=states.Completion.FAILED,
            result_code="explicit_failure",
            now_ms=clock.now_ms(),
        )
        assert done.outcome is Outcome.COMPLETED
        assert await two.list_recovery_required(now_ms=clock.now_ms(), limit=8) == []
    finally:
        await one.close()
        await two.close()
