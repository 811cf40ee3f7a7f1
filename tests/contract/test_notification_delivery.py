"""Delivering the outbox (docs/notifications.md#delivery), both dialects, to a real HTTP
receiver that verifies every signature with the `standardwebhooks` package: every event
delivered at least once and verified, a forged or stale one refused, a receiver down then back
gets everything in order per subject, one that always fails dead-letters after the bound, and
one deliverer at a time holds the lease."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import anyio
import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.domain import states
from qinglong_dispatcher.notifying import deliverer, sending
from tests.support import outbox, webhook_receiver
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import started
from tests.support.stores import Harness

FAST = deliverer.Timing(
    poll_s=0.01, lease_ms=5_000, max_attempts=3, backoff_base_ms=1, backoff_cap_ms=5, settle_ms=0
)


@pytest.fixture
async def receiver() -> AsyncIterator[webhook_receiver.Receiver]:
    async with webhook_receiver.serving() as r:
        yield r


async def _subscribe(h: Harness, r: webhook_receiver.Receiver, **kwargs: object) -> None:
    owner = await h.owner()
    sub = n.Subscription(name="ops", url=r.url, secret_ref="env:QL_TEST_WHSEC", **kwargs)  # type: ignore[arg-type]
    await owner.add_subscription(sub)


def _deliverer(
    h: Harness, r: webhook_receiver.Receiver, owner: str = "d1", timing: deliverer.Timing = FAST
) -> deliverer.Deliverer:
    return deliverer.Deliverer(
        h.store, owner=owner, timing=timing, environ={"QL_TEST_WHSEC": r.secret}
    )


async def _drain(d: deliverer.Deliverer, passes: int = 200) -> None:
    """Ticks until a pass makes no attempt and nothing is pending."""
    await d.start()
    try:
        for _ in range(passes):
            made = await d.tick()
            if not made and (await d.store.delivery_stats()).pending == 0:
                return
            await anyio.sleep(0.006)
        raise AssertionError("deliveries still pending")
    finally:
        await d.aclose()


async def _outcomes(h: Harness, clock: ManualClock) -> None:
    """Two dispatches that end (one succeeds, one fails): six events of four subjects."""
    await submit_runs(h.approver_store, clock, 2)
    for completion in (states.Completion.SUCCEEDED, states.Completion.FAILED):
        identity = await started(h, clock)
        await h.store.complete(
            identity,
            mutation_id=f"m-{completion.value}",
            completion=completion,
            result_code="ok" if completion is states.Completion.SUCCEEDED else "boom",
            now_ms=clock.now_ms(),
        )


async def test_every_event_is_delivered_and_verified_in_a_cloudevents_envelope(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver, kinds=n.KINDS)
    await _outcomes(harness, clock)
    await _drain(_deliverer(harness, receiver))
    told = await outbox.events(harness)
    assert len(told) == 6
    got = webhook_receiver.unique(receiver)
    assert set(got) == {f"qle_{e['id']}" for e in told}
    assert receiver.refused == []
    for event in told:
        document = got[f"qle_{event['id']}"]
        assert document["specversion"] == "1.0"
        assert (document["type"], document["subject"]) == (event["kind"], event["subject_id"])
        assert document["source"] == n.SOURCE
        assert document["data"]["projectId"] == event["project_id"]
        assert document["time"].endswith("Z")
    stats = await harness.store.delivery_stats()
    assert (stats.pending, stats.dead, stats.oldest_pending_age_ms) == (0, 0, 0)
    attempts = await harness.raw(
        f"SELECT outcome, response_code FROM {outbox.table(harness, 'notification_attempts')}"
    )
    assert {(a["outcome"], a["response_code"]) for a in attempts} == {("delivered", 204)}


async def test_the_default_kinds_leave_a_success_out(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver)
    await _outcomes(harness, clock)
    await _drain(_deliverer(harness, receiver))
    kinds = sorted(d["type"] for d in webhook_receiver.unique(receiver).values())
    assert "dispatch.succeeded" not in kinds
    assert kinds.count("dispatch.failed") == 1
    assert kinds.count("approval.requested") == 2


async def test_a_forged_or_stale_delivery_is_refused_by_the_verifier(
    receiver: webhook_receiver.Receiver,
) -> None:
    event = n.Event(
        id=1,
        kind="approval.requested",
        subject_id="a-1",
        project_id="p",
        action_type="t",
        at_ms=0,
        payload={},
    )
    good_key = n.webhook_key(receiver.secret.encode())
    forged_key = n.webhook_key(webhook_receiver.new_secret().encode())
    async with aiohttp.ClientSession() as session:
        now = int(time.time())
        for key, stamp in ((forged_key, now), (good_key, now - 3600), (good_key, now + 3600)):
            sent = await sending.send(session, receiver.url, key, event, "raw", timestamp_s=stamp)
            assert sent.code == 400
        assert receiver.accepted == []
        assert len(receiver.refused) == 3
        sent = await sending.send(session, receiver.url, good_key, event, "raw", timestamp_s=now)
        assert sent.code == 204
    assert receiver.ids == ["qle_1"]


async def test_a_receiver_down_then_back_gets_everything_in_order_per_subject(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver, kinds=n.KINDS)
    patient = deliverer.Timing(
        poll_s=0.01,
        lease_ms=5_000,
        max_attempts=50,
        backoff_base_ms=1,
        backoff_cap_ms=5,
        settle_ms=0,
    )
    d = _deliverer(harness, receiver, timing=patient)
    receiver.mode = "down"
    await _outcomes(harness, clock)
    await d.start()
    for _ in range(5):
        await d.tick()
        await anyio.sleep(0.006)
    assert receiver.answered >= 4
    assert receiver.accepted == []
    assert (await harness.store.delivery_stats()).pending == 6
    receiver.mode = "ok"
    await _drain(d)
    told = await outbox.events(harness)
    assert set(webhook_receiver.unique(receiver)) == {f"qle_{e['id']}" for e in told}
    by_subject: dict[str, list[int]] = {}
    for delivery in receiver.accepted:
        by_subject.setdefault(delivery["body"]["subject"], []).append(
            int(delivery["webhook-id"].removeprefix("qle_"))
        )
    for ids in by_subject.values():
        assert ids == sorted(ids)
    failed = await harness.raw(
        f"SELECT count(*) AS n FROM {outbox.table(harness, 'notification_attempts')} "
        "WHERE outcome = 'failed' AND response_code = 503"
    )
    assert failed[0]["n"] >= 4


async def test_a_receiver_that_always_fails_dead_letters_after_the_bound(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver, kinds=("approval.requested",))
    receiver.mode = "fail"
    await submit_runs(harness.approver_store, clock, 1)
    await _drain(_deliverer(harness, receiver))
    assert receiver.answered == FAST.max_attempts
    attempts = await harness.raw(
        f"SELECT attempt, outcome, response_code FROM "
        f"{outbox.table(harness, 'notification_attempts')} ORDER BY attempt"
    )
    assert [(a["attempt"], a["outcome"], a["response_code"]) for a in attempts] == [
        (1, "failed", 500),
        (2, "failed", 500),
        (3, "dead", 500),
    ]
    stats = await harness.store.delivery_stats()
    assert (stats.pending, stats.dead) == (0, 1)


async def test_one_deliverer_holds_the_lease_and_a_second_sends_nothing(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver)
    await submit_runs(harness.approver_store, clock, 1)
    first, second = _deliverer(harness, receiver, "d1"), _deliverer(harness, receiver, "d2")
    await first.start()
    await second.start()
    try:
        assert await harness.store.claim_deliverer("d1", 5_000)
        assert await second.tick() == 0
        assert receiver.answered == 0
        # One subject: its second event waits for its first (in order per subject).
        assert await first.tick() == 1
        assert await first.tick() == 1
    finally:
        await first.aclose()  # gives the lease up
        await second.aclose()
    assert await harness.store.claim_deliverer("d2", 5_000)
    assert len(receiver.accepted) == 2


async def test_a_missing_secret_sends_nothing_and_records_the_attempt(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    await _subscribe(harness, receiver, kinds=("approval.requested",))
    await submit_runs(harness.approver_store, clock, 1)
    d = deliverer.Deliverer(harness.store, owner="d1", timing=FAST, environ={})
    await _drain(d)
    assert receiver.answered == 0
    attempts = await harness.raw(
        f"SELECT outcome, error_code FROM {outbox.table(harness, 'notification_attempts')}"
    )
    assert [a["error_code"] for a in attempts] == ["secret_unavailable"] * FAST.max_attempts


async def test_a_recovery_is_delivered_to_a_subscription_naming_it(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    """A subscription that names `dispatch.recovery_required` alone hears it, verified, and
    nothing else of the same dispatch's life."""
    await _subscribe(harness, receiver, kinds=("dispatch.recovery_required",))
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await started(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert (await bootstrap.build_reconciler(harness.store, clock).reconcile_pass()).observed == 1
    await _drain(_deliverer(harness, receiver))
    [document] = webhook_receiver.unique(receiver).values()
    assert (document["type"], document["subject"]) == (
        "dispatch.recovery_required",
        one.dispatch_id,
    )
    assert document["data"]["status"] == "recovery_required"
    assert receiver.refused == []


async def test_a_slack_subscription_gets_the_approve_link_under_the_public_address(
    harness: Harness, clock: ManualClock, receiver: webhook_receiver.Receiver
) -> None:
    """The Slack format, signed like the raw one: a request waiting on a vote links its
    approval page under the address the daemon was given; its resolution links it too."""
    await _subscribe(harness, receiver, format="slack", kinds=("approval.requested",))
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    d = deliverer.Deliverer(
        harness.store,
        owner="d1",
        timing=FAST,
        ui_base="https://ql.example/ops",
        environ={"QL_TEST_WHSEC": receiver.secret},
    )
    await _drain(d)
    [document] = webhook_receiver.unique(receiver).values()
    assert receiver.refused == []
    link = f"https://ql.example/ops/ui/approvals/{one.approval_request_id}"
    assert document == {
        "text": f"approval.requested: run.create in proj-1 "
        f"({one.approval_request_id}) <{link}|approve or reject>"
    }
