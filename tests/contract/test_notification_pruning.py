"""Pruning the outbox (docs/operations.md#retention-and-pruning), both dialects: the prune
takes the events delivered or dead-lettered before its cutoff with their deliveries, attempts
and matches, and keeps every event not yet done however old; the database refuses anyone the
deletion of an event not yet done (a pending delivery, or not matched yet)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.domain import retention
from qinglong_dispatcher.lifecycle import metrics, pruning
from qinglong_dispatcher.notifying import deliverer
from tests.support import outbox, refusals, stores, webhook_receiver
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

FAST = deliverer.Timing(
    poll_s=0.01,
    lease_ms=5_000,
    max_attempts=50,
    backoff_base_ms=60_000,
    backoff_cap_ms=60_000,
    settle_ms=0,
)


@pytest.fixture
async def receiver() -> AsyncIterator[webhook_receiver.Receiver]:
    async with webhook_receiver.serving() as r:
        yield r


def _pruner(h: Harness) -> ports.Store:
    assert h.pruner_store is not None
    return h.pruner_store


async def _subscribe(h: Harness, name: str, url: str) -> None:
    owner = await h.owner()
    await owner.add_subscription(
        n.Subscription(name=name, url=url, secret_ref="env:QL_TEST_WHSEC", kinds=n.KINDS)
    )


async def _passes(h: Harness, r: webhook_receiver.Receiver, count: int = 30) -> None:
    d = deliverer.Deliverer(h.store, owner="d1", timing=FAST, environ={"QL_TEST_WHSEC": r.secret})
    await d.start()
    try:
        for _ in range(count):
            await d.tick()
            await anyio.sleep(0.005)
    finally:
        await d.aclose()


async def _count(h: Harness, table: str) -> int:
    rows = await h.raw(f"SELECT count(*) AS n FROM {outbox.table(h, table)}")
    return int(rows[0]["n"])


async def _done_and_pending(
    h: Harness, clock: ManualClock, r: webhook_receiver.Receiver
) -> tuple[set[int], set[int]]:
    """Four events delivered to a live receiver, then two still pending for a dead one."""
    await _subscribe(h, "ops", r.url)
    await submit_runs(h.approver_store, clock, 2)
    await _passes(h, r)
    done = {e["id"] for e in await outbox.events(h)}
    assert len(done) == 4
    await _subscribe(h, "down", "http://127.0.0.1:9/nobody")
    await submit_runs(h.approver_store, clock, 1)
    await _passes(h, r)
    pending = {e["id"] for e in await outbox.events(h)} - done
    assert len(pending) == 2
    statuses = await h.raw(
        f"SELECT subscription, status FROM {outbox.table(h, 'notification_deliveries')}"
    )
    assert {(s["subscription"], s["status"]) for s in statuses} == {
        ("ops", "delivered"),
        ("down", "pending"),
    }
    return done, pending


async def test_the_prune_takes_what_was_delivered_and_keeps_what_is_pending(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    done, pending = await _done_and_pending(harness, clock, receiver)
    # A cutoff before the deliveries finished takes nothing.
    early = await _pruner(harness).prune_batch(cutoff_ms=0, audit_cutoff_ms=0, limit=500)
    assert early.notification_events == 0
    cutoff = int(time.time() * 1000) + 1_000
    dry = await _pruner(harness).prune_batch(
        cutoff_ms=cutoff, audit_cutoff_ms=0, limit=500, dry_run=True
    )
    assert (dry.notification_events, dry.notification_deliveries) == (4, 4)
    # Two batches of at most three: every delivered event goes, and nothing else.
    first = await _pruner(harness).prune_batch(cutoff_ms=cutoff, audit_cutoff_ms=0, limit=3)
    second = await _pruner(harness).prune_batch(cutoff_ms=cutoff, audit_cutoff_ms=0, limit=3)
    assert (first.notification_events, second.notification_events) == (3, 1)
    # Each went with its one delivery (to "ops": "down" came after them).
    assert (first.notification_deliveries, second.notification_deliveries) == (3, 1)
    assert {e["id"] for e in await outbox.events(harness)} == pending
    for table in ("notification_deliveries", "notification_attempts", "notification_fanouts"):
        rows = await harness.raw(f"SELECT event_id FROM {outbox.table(harness, table)}")
        assert {r["event_id"] for r in rows} <= pending, table
    assert await _count(harness, "notification_attempts") > 0  # the pending ones' attempts
    # Removing the dead subscription takes its pending deliveries; its events may go then,
    # but the newest one of an edge file stays (its id would be reused).
    owner = await harness.owner()
    assert await owner.remove_subscription("down")
    last = await _pruner(harness).prune_batch(
        cutoff_ms=cutoff + 60_000, audit_cutoff_ms=0, limit=500
    )
    kept = {e["id"] for e in await outbox.events(harness)}
    if harness.dialect == "sqlite":
        assert kept == {max(pending)}
        assert last.notification_events == 1
    else:
        assert kept == set()
        assert last.notification_events == 2
    assert done.isdisjoint(kept)


async def test_the_prune_counts_the_events_and_deliveries_it_removes(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    """What a pass of the prune removes of the outbox is in its metrics, as its dispatch trees
    and audit records are."""
    await _done_and_pending(harness, clock, receiver)
    the_metrics = metrics.Metrics(profile="edge", cadence_s=1.0, process_metrics=False)
    pruner = pruning.Pruner(_pruner(harness), clock, metrics=the_metrics, batch_limit=3)
    cutoff = int(time.time() * 1000) + 1_000
    report = await pruner.prune(retention.Cutoffs(dispatch_before_ms=cutoff, audit_before_ms=0))
    assert (report.counts.notification_events, report.counts.notification_deliveries) == (4, 4)
    assert report.batches == 2
    exposed = the_metrics.render()
    assert b"qinglong_dispatcher_pruned_notification_events_total 4.0" in exposed
    assert b"qinglong_dispatcher_pruned_notification_deliveries_total 4.0" in exposed
    # The two events still pending keep theirs: each to both subscriptions.
    assert await _count(harness, "notification_deliveries") == 4


async def test_no_one_deletes_an_event_that_is_not_done(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    """The schema's owner (the test's raw SQL), and on PostgreSQL the pruner and the runtime,
    are refused; nothing changes."""
    _, pending = await _done_and_pending(harness, clock, receiver)
    one = min(pending)
    before = await outbox.events(harness)
    deliveries = f"{outbox.table(harness, 'notification_deliveries')}"
    attacks = [
        f"DELETE FROM {deliveries} WHERE event_id = {one}",
        f"DELETE FROM {outbox.table(harness, 'notification_attempts')} WHERE event_id = {one}",
        f"DELETE FROM {outbox.table(harness, 'notification_events')} WHERE id = {one}",
    ]
    for attack in attacks:
        with pytest.raises(Exception) as refused:
            await harness.raw(attack)
        if harness.dialect == "postgres":
            assert getattr(refused.value, "sqlstate", None) == "23001", attack
        else:
            assert "pending" in str(refused.value) or "goes only" in str(refused.value), attack
    if harness.dialect == "postgres":
        database = str(await harness.scalar("SELECT current_database()"))
        for attack in attacks:
            got = await refusals.sqlstate_as(stores.pruner_url(database), attack)
            assert got == "23001", attack
            got = await refusals.sqlstate_as(stores.runtime_url(database), attack)
            assert got == "42501", attack
    assert await outbox.events(harness) == before
