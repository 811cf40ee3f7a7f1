"""The fan-out's watermark, both dialects: every event at or below it is matched, and the
prune takes only those (docs/operations.md#retention-and-pruning). Events matched before they
had settled are covered on a later pass once they have, with nothing new to match: else only
the next event to arrive moved the watermark past them, and the last events before a quiet
spell stayed out of the prune's reach."""

from __future__ import annotations

from qinglong_dispatcher.domain import notifications as n
from tests.support import outbox
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.stores import Harness

HOUR_MS = 3_600_000


async def _watermark(h: Harness) -> int:
    rows = await h.raw(
        f"SELECT fanned_out_through FROM {outbox.table(h, 'notification_deliverer')}"
    )
    return int(rows[0]["fanned_out_through"])


async def test_the_watermark_reaches_events_matched_before_they_settled(
    harness: Harness, clock: ManualClock
) -> None:
    owner = await harness.owner()
    await owner.add_subscription(
        n.Subscription(
            name="ops", url="https://ops.invalid/hook", secret_ref="env:QL_OPS", kinds=n.KINDS
        )
    )
    await submit_runs(harness.approver_store, clock, 1)
    written = [e["id"] for e in await outbox.events(harness)]
    assert written
    assert await harness.store.claim_deliverer("d1", 5_000)
    before = await _watermark(harness)

    # Matched while still inside the settling time: the watermark stays below them.
    assert await harness.store.fan_out("d1", limit=100, settle_ms=HOUR_MS)
    assert await _watermark(harness) == before

    # Nothing new to match, and they have settled (a settling time of 0): now it covers them.
    assert await harness.store.fan_out("d1", limit=100, settle_ms=0) == []
    assert await _watermark(harness) == max(written)

    # And a pass with nothing new leaves it where it is.
    assert await harness.store.fan_out("d1", limit=100, settle_ms=0) == []
    assert await _watermark(harness) == max(written)
