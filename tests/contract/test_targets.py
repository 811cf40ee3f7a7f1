"""Targets, one change at a time (docs/state-machine.md#targets), on every dialect: the database
copies a plan's target into its dispatch and execution; a busy target's other dispatches are
skipped by the claim without spending attempts and claimed once it is free; a held target
(its last effect `recovery_required`) waits until an operator settles it, then proceeds; and
`dispatch show` / `dispatch list` say why a dispatch waits."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import dispatch_views, records, states, targets
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.usecases import resolving
from tests.support import faults
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution
from tests.support.stores import Harness
from tests.support.targets import finish, submit_change


async def _claim(h: Harness, clock: ManualClock) -> list[str]:
    batch = await h.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=16, lease_ms=LEASE_MS)
    return [c.dispatch_id for c in batch.claimed]


async def _row(h: Harness, dispatch_id: str) -> records.Execution:
    row = await h.store.get_execution(dispatch_id)
    assert row is not None
    return row


async def _targets(h: Harness, dispatch_id: str) -> tuple[Any, ...]:
    rows = await h.raw(
        f"SELECT d.target AS d, e.target AS e, p.target AS p "
        f"FROM {faults.table(h, 'approved_action_dispatches')} AS d "
        f"JOIN {faults.table(h, 'approved_action_dispatch_executions')} AS e "
        "ON e.dispatch_id = d.dispatch_id "
        f"JOIN {faults.table(h, 'action_plans')} AS p "
        "ON p.project_id = d.project_id AND p.action_ref = d.action_ref "
        f"WHERE d.dispatch_id = '{dispatch_id}'"
    )
    return (rows[0]["p"], rows[0]["d"], rows[0]["e"])


async def test_the_database_copies_the_plans_target_into_dispatch_and_execution(
    harness: Harness, clock: ManualClock
) -> None:
    changed = await submit_change(harness.approver_store, clock, "act-a", "router-1")
    untargeted = await submit_change(harness.approver_store, clock, "act-b", None)

    assert await _targets(harness, changed) == ("router-1", "router-1", "router-1")
    assert await _targets(harness, untargeted) == (None, None, None)
    dispatch = await harness.store.get_dispatch(changed)
    assert dispatch is not None
    assert dispatch.target == "router-1"


async def test_a_busy_target_is_skipped_without_spending_attempts_and_claimed_after(
    harness: Harness, clock: ManualClock
) -> None:
    first = await submit_change(harness.approver_store, clock, "act-1", "router-1")
    clock.advance(ms=1)
    second = await submit_change(harness.approver_store, clock, "act-2", "router-1")
    other = await submit_change(harness.approver_store, clock, "act-3", "router-2")
    clock.advance(ms=1)

    # One observation sees both changes of router-1: only the first is leased.
    assert await _claim(harness, clock) == [first, other]
    waiting = await _row(harness, second)
    assert (waiting.status, waiting.attempt, waiting.version) == (ExecutionStatus.PENDING, 0, 0)
    # Later claims skip it while the target is busy, whatever they are asked for.
    clock.advance(s=1)
    assert await _claim(harness, clock) == []
    assert (await _row(harness, second)).attempt == 0

    summary = next(
        s
        for s in (
            await harness.store.list_dispatches(dispatch_views.ListQuery(), now_ms=clock.now_ms())
        ).dispatches
        if s.dispatch_id == second
    )
    assert summary.waiting == targets.TargetWait(
        target="router-1", kind=targets.TargetWaitKind.BUSY, by_dispatch_id=first
    )
    assert summary.as_dict()["waiting_for_target"] == {"target": "router-1", "busy_by": first}

    _dispatch, identity = await started_execution_of(harness, clock, first)
    done = await finish(harness.store, identity, now_ms=clock.now_ms())
    assert done.outcome is records.Outcome.COMPLETED

    assert await _claim(harness, clock) == [second]
    claimed = await _row(harness, second)
    assert (claimed.status, claimed.attempt) == (ExecutionStatus.LEASED, 1)
    detail = await harness.store.show_dispatch(second, now_ms=clock.now_ms())
    assert detail is not None
    assert detail.execution.waiting_for_target is None
    assert detail.dispatch.target == "router-1"


async def started_execution_of(
    h: Harness, clock: ManualClock, dispatch_id: str
) -> tuple[records.Dispatch, records.ExecutionIdentity]:
    """Start the leased `dispatch_id` (its lease read back from its row)."""
    row = await _row(h, dispatch_id)
    dispatch = await h.store.get_dispatch(dispatch_id)
    assert dispatch is not None
    assert row.lease_owner
    assert row.lease_token
    assert row.lease_expires_at_ms is not None
    lease = records.Lease(
        dispatch_id=dispatch_id,
        attempt=row.attempt,
        owner=row.lease_owner,
        token=row.lease_token,
        version=row.version,
        expires_at_ms=row.lease_expires_at_ms,
    )
    (result,) = await h.store.start(
        [
            records.StartRequest(
                lease=lease,
                approval_request_id=dispatch.approval_request_id,
                action_digest=dispatch.action_digest,
            )
        ],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert result.identity is not None
    return dispatch, result.identity


async def test_a_held_target_waits_until_an_operator_settles_it_then_proceeds(
    harness: Harness, clock: ManualClock
) -> None:
    first = await submit_change(harness.approver_store, clock, "act-1", "router-1")
    clock.advance(ms=1)
    dispatch, _ = await started_execution(harness, clock)
    assert dispatch.dispatch_id == first
    second = await submit_change(harness.approver_store, clock, "act-2", "router-1")
    # The first change's lease runs out while it executes: its outcome is unknown.
    clock.advance(ms=LEASE_MS + 1)
    assert (await _row(harness, first)).effective_status(clock.now_ms()) is (
        states.EffectiveStatus.RECOVERY_REQUIRED
    )

    for _ in range(3):
        assert await _claim(harness, clock) == []
        clock.advance(s=5)
    waiting = await _row(harness, second)
    assert (waiting.status, waiting.attempt, waiting.version) == (ExecutionStatus.PENDING, 0, 0)
    detail = await harness.store.show_dispatch(second, now_ms=clock.now_ms())
    assert detail is not None
    assert detail.execution.waiting_for_target == targets.TargetWait(
        target="router-1", kind=targets.TargetWaitKind.HELD, by_dispatch_id=first
    )
    assert str(detail.execution.waiting_for_target) == f"waiting_for_target held_by {first}"

    await resolving.resolve_manually(
        harness.operator_store,
        clock,
        first,
        resolution=states.Completion.FAILED,
        operator="olga",
        reason="checked_router",
    )

    assert await _claim(harness, clock) == [second]
    assert (await _row(harness, second)).attempt == 1


async def test_the_metrics_count_held_and_busy_targets(
    harness: Harness, clock: ManualClock
) -> None:
    assert await harness.store.target_holders(now_ms=clock.now_ms()) == targets.HolderCounts(
        held=0, busy=0
    )
    held = await submit_change(harness.approver_store, clock, "act-1", "router-1")
    clock.advance(ms=1)
    dispatch, _ = await started_execution(harness, clock)
    assert dispatch.dispatch_id == held
    clock.advance(ms=LEASE_MS + 1)  # router-1's change is recovery_required: the target held
    await submit_change(harness.approver_store, clock, "act-2", "router-1")  # waits, not counted
    await submit_change(harness.approver_store, clock, "act-3", "router-2")
    await submit_change(harness.approver_store, clock, "act-4", None)  # no target: not counted
    assert len(await _claim(harness, clock)) == 2  # router-2's (busy) and the untargeted one

    counts = await harness.store.target_holders(now_ms=clock.now_ms())

    assert counts == targets.HolderCounts(held=1, busy=1)
    # Settled, the held target is busy again at once: its next change is claimed.
    await resolving.resolve_manually(
        harness.operator_store,
        clock,
        held,
        resolution=states.Completion.FAILED,
        operator="olga",
        reason="checked_router",
    )
    assert len(await _claim(harness, clock)) == 1
    assert await harness.store.target_holders(now_ms=clock.now_ms()) == targets.HolderCounts(
        held=0, busy=2
    )
