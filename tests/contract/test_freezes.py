"""Change freezes (docs/operations.md#freezes-and-holds), on every dialect: the administrator
writes and ends them, audited; a dispatch a freeze covers waits (the claim leaves it out and
spends nothing) until the freeze ends or an operator who is not its requester lifts it for that
dispatch, audited."""

from __future__ import annotations

import time

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import freezes
from tests.support import faults
from tests.support.clock import ManualClock
from tests.support.stores import Harness
from tests.support.targets import submit_change
from tests.support.windows import another_approver, execution

HOUR_MS = 3_600_000


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the freezes."""
    return ManualClock(int(time.time() * 1000))


async def _freeze(h: Harness, now: ManualClock, **scope: str) -> freezes.Freeze:
    owner = await h.owner()
    return await owner.add_freeze(
        freezes.NewFreeze(
            from_ms=now.ms - 1000, until_ms=now.ms + HOUR_MS, reason="release week", **scope
        )
    )


async def _claimed(h: Harness, now: ManualClock) -> list[str]:
    batch = await h.store.claim_due(now_ms=now.ms, owner="w1", limit=16, lease_ms=30_000)
    return sorted(c.dispatch_id for c in batch.claimed)


async def _lifter(h: Harness) -> ports.Store:
    """An operator who is not the requester: on SQLite another OS principal."""
    return h.operator_store if h.dialect == "postgres" else await another_approver(h)


async def test_a_freeze_holds_what_it_covers_and_spends_nothing(
    harness: Harness, now: ManualClock
) -> None:
    frozen = await submit_change(harness.approver_store, now, "act-1", "router-1")
    before = await execution(harness, frozen)
    freeze = await _freeze(harness, now)
    assert freeze.scope() == "all"
    assert freeze.created_by
    assert await harness.store.freezes_covering(frozen) == [freeze.freeze_id]

    assert await _claimed(harness, now) == []
    assert await execution(harness, frozen) == before
    assert await harness.store.count_frozen() == 1
    listed = await harness.store.list_freezes()
    assert [f.freeze_id for f in listed] == [freeze.freeze_id]

    owner = await harness.owner()
    ended = await owner.end_freeze(freeze.freeze_id)
    assert ended.ended_at_ms is not None
    assert not ended.in_force(now.ms)
    assert await harness.store.list_freezes() == []
    assert await harness.store.count_frozen() == 0
    assert await _claimed(harness, now) == [frozen]
    audit = await harness.raw(
        f"SELECT kind FROM {faults.table(harness, 'security_audit_events')} "
        f"WHERE subject_id = 'freeze:{freeze.freeze_id}' ORDER BY event_id"
    )
    assert [r["kind"] for r in audit] == ["approval.freeze_added", "approval.freeze_ended"]


async def test_a_freeze_covers_only_its_scope(harness: Harness, now: ManualClock) -> None:
    db = await submit_change(harness.approver_store, now, "act-1", "prod-db")
    web = await submit_change(harness.approver_store, now, "act-2", "staging-web")
    untargeted = await submit_change(harness.approver_store, now, "act-3", None)
    await _freeze(harness, now, target_prefix="prod-")

    assert await _claimed(harness, now) == sorted([web, untargeted])
    assert await harness.store.freezes_covering(db) != []
    assert await harness.store.freezes_covering(web) == []


async def test_an_operator_lifts_a_freeze_for_one_dispatch(
    harness: Harness, now: ManualClock
) -> None:
    lifted = await submit_change(harness.approver_store, now, "act-1", "router-1")
    held = await submit_change(harness.approver_store, now, "act-2", "router-2")
    freeze = await _freeze(harness, now, project_id="p1")
    lifter = await _lifter(harness)
    try:
        assert await lifter.lift_freeze(lifted, reason="hotfix for the outage") == [
            freeze.freeze_id
        ]
        # Nothing more covers it: a second lift lifts nothing.
        assert await lifter.lift_freeze(lifted, reason="again") == []
    finally:
        if lifter is not harness.operator_store:
            await lifter.close()

    assert await _claimed(harness, now) == [lifted]
    assert await harness.store.freezes_covering(held) == [freeze.freeze_id]
    audit = await harness.raw(
        f"SELECT kind, detail_code FROM {faults.table(harness, 'security_audit_events')} "
        f"WHERE subject_id = '{lifted}' AND kind = 'approval.freeze_lifted'"
    )
    assert [tuple(r.values()) for r in audit] == [("approval.freeze_lifted", str(freeze.freeze_id))]


async def test_a_freeze_to_come_holds_nothing_yet(harness: Harness, now: ManualClock) -> None:
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    owner = await harness.owner()
    later = await owner.add_freeze(
        freezes.NewFreeze(from_ms=now.ms + HOUR_MS, until_ms=now.ms + 2 * HOUR_MS, reason="x")
    )
    assert [f.freeze_id for f in await harness.store.list_freezes()] == [later.freeze_id]
    assert await _claimed(harness, now) == [dispatch_id]
