"""Subscriptions by target prefix (docs/notifications.md#subscriptions), both dialects: the
database gives each event its plan's or its dispatch's target, and a subscription naming a
prefix is matched against it byte for byte; one naming none hears every target and events
without one."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.domain import states
from tests.support import outbox
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import started
from tests.support.stores import Harness
from tests.support.targets import claim_and_start, submit_change


async def _subscribe(h: Harness, name: str, prefix: str | None) -> None:
    owner = await h.owner()
    await owner.add_subscription(
        n.Subscription(
            name=name,
            url="https://listener.invalid/hook",
            secret_ref="env:QL_LISTENER",
            kinds=n.KINDS,
            target_prefix=prefix,
        )
    )


async def _heard(h: Harness) -> dict[str, set[tuple[str, str]]]:
    """Each subscription's deliveries as (kind, subject), after one fan-out."""
    assert await h.store.claim_deliverer("d1", 5_000)
    await h.store.fan_out("d1", limit=100, settle_ms=0)
    rows = await h.raw(
        f"SELECT d.subscription, e.kind, e.subject_id "
        f"FROM {outbox.table(h, 'notification_deliveries')} AS d "
        f"JOIN {outbox.table(h, 'notification_events')} AS e ON e.id = d.event_id"
    )
    heard: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        heard.setdefault(row["subscription"], set()).add((row["kind"], row["subject_id"]))
    return heard


async def test_a_prefix_hears_its_targets_events_and_no_other(
    harness: Harness, clock: ManualClock
) -> None:
    await _subscribe(harness, "edge", "edge-")
    await _subscribe(harness, "all", None)
    edge = await submit_change(harness.approver_store, clock, "act-1", "edge-7")
    # The change fails: a dispatch's event carries the dispatch's target.
    dispatch, identity = await claim_and_start(harness.store, clock, lease_ms=LEASE_MS)
    assert dispatch.dispatch_id == edge
    await harness.store.complete(
        identity,
        mutation_id="m-failed",
        completion=states.Completion.FAILED,
        result_code="boom",
        now_ms=clock.now_ms(),
    )
    core = await submit_change(harness.approver_store, clock, "act-2", "core-7")
    (untargeted,) = await submit_runs(harness.approver_store, clock, 1)
    requests = {
        e["subject_id"]
        for e in await outbox.events(harness)
        if e["kind"] == "approval.requested" and e["payload"]["actionRef"] == "act-1"
    }
    heard = await _heard(harness)
    assert heard["edge"] == {
        ("approval.requested", next(iter(requests))),
        ("approval.approved", next(iter(requests))),
        ("dispatch.failed", edge),
    }
    told = {(e["kind"], e["subject_id"]) for e in await outbox.events(harness)}
    assert heard["all"] == told
    assert ("approval.requested", untargeted.approval_request_id) in told
    assert core not in {subject for _, subject in heard["edge"]} | requests


@pytest.mark.parametrize("prefix", ["", "edge *", "edge-%", "x" * 129, "é"])
async def test_a_bad_prefix_is_refused_before_the_database(harness: Harness, prefix: str) -> None:
    with pytest.raises(n.SubscriptionInvalid):
        await _subscribe(harness, "bad", prefix)
    assert await harness.store.list_subscriptions() == []


@pytest.mark.parametrize("prefix", ["", "edge *", "edge-%", "x" * 129])
async def test_the_database_refuses_a_bad_prefix_written_around_the_product(
    harness: Harness, prefix: str
) -> None:
    """Even the owner's raw write (23514 on PostgreSQL, a CHECK failure on SQLite)."""
    with pytest.raises(Exception) as refused:
        await harness.raw(
            f"INSERT INTO {outbox.table(harness, 'notification_subscriptions')} (name, url, "
            "secret_ref, kinds_json, target_prefix, created_at_ms) VALUES ('bad', "
            f"'http://127.0.0.1:9/x', 'env:X', '[]', '{prefix}', 0)"
        )
    if harness.dialect == "postgres":
        assert getattr(refused.value, "sqlstate", None) == "23514"
    else:
        assert "CHECK constraint failed" in str(refused.value)
    assert await harness.store.list_subscriptions() == []


async def test_an_event_no_subscription_hears_is_not_kept(
    harness: Harness, clock: ManualClock
) -> None:
    """Told of failures only: a success writes no event, a failure its own; a recovery mark
    nobody hears is written without its events (the change holds, the event is dropped)."""
    owner = await harness.owner()
    await owner.add_subscription(
        n.Subscription(
            name="failures",
            url="https://listener.invalid/hook",
            secret_ref="env:QL_LISTENER",
            kinds=("dispatch.failed",),
        )
    )
    await submit_runs(harness.approver_store, clock, 3)
    for completion in (states.Completion.SUCCEEDED, states.Completion.FAILED):
        identity = await started(harness, clock)
        await harness.store.complete(
            identity,
            mutation_id=f"m-{completion.value}",
            completion=completion,
            result_code="done",
            now_ms=clock.now_ms(),
        )
    stuck = await started(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert (await bootstrap.build_reconciler(harness.store, clock).reconcile_pass()).observed == 1
    told = await outbox.events(harness)
    assert [(e["kind"], e["subject_id"]) for e in told] == [
        ("dispatch.failed", told[0]["subject_id"])
    ]
    assert stuck.dispatch_id != told[0]["subject_id"]


async def test_a_change_nobody_hears_builds_no_event_at_all(
    harness: Harness, clock: ManualClock
) -> None:
    """The telling triggers ask before they build (migration 0042): with the keep trigger
    gone, a request, its approval, a success and a recovery mark nobody hears still write no
    event, while the failure someone hears writes its own."""
    if harness.dialect == "postgres":
        await harness.raw(
            "DROP TRIGGER notification_events_while_someone_listens ON qinglong.notification_events"
        )
    else:
        await harness.raw("DROP TRIGGER notification_events_while_someone_listens")
    owner = await harness.owner()
    await owner.add_subscription(
        n.Subscription(
            name="failures",
            url="https://listener.invalid/hook",
            secret_ref="env:QL_LISTENER",
            kinds=("dispatch.failed",),
        )
    )
    await submit_runs(harness.approver_store, clock, 3)
    for completion in (states.Completion.SUCCEEDED, states.Completion.FAILED):
        identity = await started(harness, clock)
        await harness.store.complete(
            identity,
            mutation_id=f"m-{completion.value}",
            completion=completion,
            result_code="done",
            now_ms=clock.now_ms(),
        )
    await started(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert (await bootstrap.build_reconciler(harness.store, clock).reconcile_pass()).observed == 1
    assert [e["kind"] for e in await outbox.events(harness)] == ["dispatch.failed"]
