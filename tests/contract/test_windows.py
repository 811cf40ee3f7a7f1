"""Execution windows (docs/state-machine.md#windows-and-freezes), on every dialect: the
database copies a policy's window into the dispatch and its execution from its own clock; the
claim never leases a row before or after its window and spends nothing on it; past the window
the reconcile pass ends a waiting row `cancelled` (`window_expired`), never starts it late."""

from __future__ import annotations

import time

import anyio
import pytest

from qinglong_dispatcher.domain import records
from qinglong_dispatcher.recovery.reconciler import Reconciler
from tests.support import faults, outbox
from tests.support.clock import ManualClock
from tests.support.stores import Harness
from tests.support.targets import submit_change
from tests.support.windows import (
    database_now_ms,
    dispatch_window,
    execution,
    submit_windowed,
    window_policy,
)

HOUR_MS = 3_600_000


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the windows."""
    return ManualClock(int(time.time() * 1000))


@pytest.fixture(autouse=True)
async def _someone_listens(harness: Harness) -> None:
    await outbox.someone_listens(harness)


async def test_a_dispatch_without_a_window_policy_has_none(
    harness: Harness, now: ManualClock
) -> None:
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    assert await dispatch_window(harness, dispatch_id) == (None, None)
    row = await execution(harness, dispatch_id)
    assert (row["not_before_ms"], row["not_after_ms"]) == (None, None)


async def test_the_window_is_copied_from_the_policy_on_the_database_clock(
    harness: Harness, now: ManualClock
) -> None:
    await window_policy(harness, delay_ms=HOUR_MS, window_ms=2 * HOUR_MS)
    before = await database_now_ms(harness)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    after = await database_now_ms(harness)

    not_before, not_after = await dispatch_window(harness, dispatch_id)
    assert before + HOUR_MS <= not_before <= after + HOUR_MS
    assert not_after == not_before + 2 * HOUR_MS
    row = await execution(harness, dispatch_id)
    assert (row["not_before_ms"], row["not_after_ms"]) == (not_before, not_after)
    # Due at the window's start: the due index keeps it out of every claim until then.
    assert row["eligible_at_ms"] == not_before


async def test_the_claim_never_leases_before_the_window_and_spends_nothing(
    harness: Harness, now: ManualClock
) -> None:
    await window_policy(harness, delay_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    before = await execution(harness, dispatch_id)

    batch = await harness.store.claim_due(now_ms=now.ms, owner="w1", limit=8, lease_ms=30_000)
    assert not batch.claimed
    # A caller whose clock runs ahead sees it due; the database's clock still says no.
    ahead = now.ms + 2 * HOUR_MS
    batch = await harness.store.claim_due(now_ms=ahead, owner="w1", limit=8, lease_ms=30_000)
    assert [c.outcome.value for c in batch.claims] == ["conflict"]
    assert await execution(harness, dispatch_id) == before


async def test_past_the_window_the_claim_skips_and_the_pass_ends_it_expired(
    harness: Harness, now: ManualClock
) -> None:
    await window_policy(harness, window_ms=1000)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    open_one = await submit_windowed(harness, now, "act-2", None)
    await anyio.sleep(1.1)
    now.ms = int(time.time() * 1000)
    before = await execution(harness, dispatch_id)

    # Left out of the observation: no lease, no attempt, no ledger line.
    batch = await harness.store.claim_due(now_ms=now.ms, owner="w1", limit=8, lease_ms=30_000)
    assert not batch.claimed
    assert batch.observed == 0
    assert await execution(harness, dispatch_id) == before
    assert open_one  # (both expire: the policy is the action's)

    sweep = Reconciler(harness.store, {}, now)
    report = await sweep.reconcile_pass()
    assert report.windows_expired == 2
    assert report.as_dict()["windows_expired"] == 2
    row = await execution(harness, dispatch_id)
    assert (row["status"], row["result_code"], row["attempt"]) == (
        "cancelled",
        "window_expired",
        0,
    )
    assert row["started_at_ms"] is None
    assert row["eligible_at_ms"] is None
    ledger = await harness.raw(
        f"SELECT from_status, to_status, result_code FROM "
        f"{faults.table(harness, 'execution_events')} "
        f"WHERE dispatch_id = '{dispatch_id}' ORDER BY version"
    )
    assert [tuple(r.values()) for r in ledger] == [
        (None, "pending", None),
        ("pending", "cancelled", "window_expired"),
    ]
    assert (await sweep.reconcile_pass()).windows_expired == 0


async def test_inside_the_window_the_claim_leases_and_starts(
    harness: Harness, now: ManualClock
) -> None:
    await window_policy(harness, window_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", "router-1")
    batch = await harness.store.claim_due(now_ms=now.ms, owner="w1", limit=8, lease_ms=30_000)
    (claim,) = batch.claimed
    assert claim.dispatch_id == dispatch_id
    assert claim.lease is not None
    assert claim.dispatch is not None
    request = records.StartRequest(
        lease=claim.lease,
        approval_request_id=claim.dispatch.approval_request_id,
        action_digest=claim.dispatch.action_digest,
    )
    (started,) = await harness.store.start([request], now_ms=now.ms, lease_ms=30_000)
    assert started.outcome.value == "started", started
    # The pass leaves a started row alone, whatever its window.
    assert (await Reconciler(harness.store, {}, now).reconcile_pass()).windows_expired == 0


async def test_a_claim_whose_holder_died_ends_past_its_window_once_its_lease_ran_out(
    harness: Harness, now: ManualClock
) -> None:
    """A row leased inside its window whose holder never reached the barrier can no longer be
    taken over once the window closed: the pass ends it, but never under a live lease."""
    await window_policy(harness, window_ms=3000)
    await submit_windowed(harness, now, "act-1", None)
    await submit_windowed(harness, now, "act-2", None)
    held: list[str] = []
    for lease_ms in (1000, 60_000):
        batch = await harness.store.claim_due(now_ms=now.ms, owner="w1", limit=1, lease_ms=lease_ms)
        held += [claim.dispatch_id for claim in batch.claimed]
    died, alive = held
    await anyio.sleep(3.2)
    now.ms = int(time.time() * 1000)
    still = await execution(harness, alive)

    report = await Reconciler(harness.store, {}, now).reconcile_pass()
    assert report.windows_expired == 1
    row = await execution(harness, died)
    assert (row["status"], row["result_code"], row["attempt"], row["started_at_ms"]) == (
        "cancelled",
        "window_expired",
        1,
        None,
    )
    ledger = await harness.raw(
        f"SELECT from_status, to_status, result_code FROM "
        f"{faults.table(harness, 'execution_events')} "
        f"WHERE dispatch_id = '{died}' ORDER BY version"
    )
    assert [tuple(r.values()) for r in ledger] == [
        (None, "pending", None),
        ("pending", "leased", None),
        ("leased", "cancelled", "window_expired"),
    ]
    # The live lease is its holder's until it runs out, window or not.
    assert await execution(harness, alive) == still
