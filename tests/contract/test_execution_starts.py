"""The execution contract (docs/state-machine.md) on every dialect: the start barrier, renewals."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import claim_one, start_request
from tests.support.stores import Harness


@pytest.mark.parametrize(
    ("change", "outcome", "reason"),
    [
        ({"approval_request_id": "a-other"}, Outcome.CONFLICT, "approval_mismatch"),
        ({"action_digest": "0" * 64}, Outcome.CONFLICT, "digest_mismatch"),
        ({"owner": "w-other"}, Outcome.CONFLICT, "lease_lost"),
        ({"token": "t-other"}, Outcome.CONFLICT, "lease_lost"),
        ({"version": 7}, Outcome.CONFLICT, "stale_version"),
    ],
)
async def test_start_rejects_a_wrong_binding_or_fence(
    harness: Harness, clock: ManualClock, change: dict[str, Any], outcome: Outcome, reason: str
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    lease_fields = {k: v for k, v in change.items() if k in ("owner", "token", "version")}
    other = {k: v for k, v in change.items() if k not in lease_fields}
    lease = dataclasses.replace(claim.lease, **lease_fields)
    (result,) = await harness.store.start(
        [start_request(claim, lease=lease, **other)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert (result.outcome, result.reason) == (outcome, reason)
    row = await harness.store.get_execution(claim.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.LEASED


async def test_start_rejects_an_expired_lease(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    clock.advance(ms=LEASE_MS)
    (result,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert (result.outcome, result.reason) == (Outcome.EXPIRED, "lease_expired")


async def test_start_replays_an_unacknowledged_barrier_under_the_same_fence(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    (first,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    clock.advance(ms=5)
    (again,) = await harness.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert first.outcome is Outcome.STARTED
    assert again.outcome is Outcome.REPLAYED
    assert again.identity == first.identity
    events = await harness.store.execution_events(claim.dispatch_id)
    assert [e.to_status for e in events].count(ExecutionStatus.EXECUTING) == 1


async def test_start_takes_several_items_with_per_item_results(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 3)
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w1", limit=3, lease_ms=LEASE_MS
    )
    good, bad, good2 = batch.claimed
    results = await harness.store.start(
        [start_request(good), start_request(bad, action_digest="f" * 64), start_request(good2)],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert [r.outcome for r in results] == [Outcome.STARTED, Outcome.CONFLICT, Outcome.STARTED]
    assert [r.dispatch_id for r in results] == [
        good.dispatch_id,
        bad.dispatch_id,
        good2.dispatch_id,
    ]


async def test_renew_needs_the_exact_unexpired_fence(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    clock.advance(ms=1000)
    renewal = await harness.store.renew(claim.lease, now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert renewal.outcome is Outcome.RENEWED
    assert renewal.lease is not None
    assert renewal.lease.version == claim.lease.version + 1
    assert renewal.lease.expires_at_ms == clock.now_ms() + LEASE_MS
    stale = await harness.store.renew(claim.lease, now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert (stale.outcome, stale.reason) == (Outcome.CONFLICT, "stale_version")
    row = await harness.store.get_execution(claim.dispatch_id)
    assert row is not None
    assert row.eligible_at_ms == renewal.lease.expires_at_ms
    events = await harness.store.execution_events(claim.dispatch_id)
    assert len(events) == 2  # a renew changes no status and writes no event
