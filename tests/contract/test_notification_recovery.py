"""Recovery in the notification outbox (docs/notifications.md), both dialects: the database
writes `dispatch.recovery_required` and, for a dispatch with a target, `target.held` in the
transaction that writes the ledger's `recovery_required` mark; a mark not written (a statement
rolled back) writes neither, and a dispatch without a target is never told held."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.domain import records, states, uncertainty
from qinglong_dispatcher.usecases import resolving
from tests.support import outbox
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution
from tests.support.stores import Harness
from tests.support.targets import submit_change

_HELD_KINDS = ["dispatch.recovery_required", "target.held"]


async def _marks(h: Harness) -> list[str]:
    rows = await h.raw(
        f"SELECT dispatch_id FROM {outbox.table(h, 'recovery_required_marks')} ORDER BY 1"
    )
    return [str(r["dispatch_id"]) for r in rows]


async def _pass(h: Harness, clock: ManualClock) -> int:
    return (await bootstrap.build_reconciler(h.store, clock).reconcile_pass()).observed


def _lost(identity: records.ExecutionIdentity) -> uncertainty.LostTrack:
    return uncertainty.LostTrack(
        identity=identity, result_code="command_exit_uncertain", evidence={"exitCode": 1}
    )


@pytest.fixture(autouse=True)
async def _someone_listens(harness: Harness) -> None:
    """The database keeps events only while a subscription exists (migration 0034)."""
    await outbox.someone_listens(harness)


async def test_a_pass_that_marks_a_targeted_dispatch_tells_it_and_its_held_target(
    harness: Harness, clock: ManualClock
) -> None:
    held = await submit_change(harness.approver_store, clock, "act-1", "router-1")
    clock.advance(ms=1)
    _, identity = await started_execution(harness, clock)
    await harness.store.record_uncertain(_lost(identity))
    assert await outbox.kinds(harness, held) == []
    clock.advance(ms=LEASE_MS + 1)
    assert await _pass(harness, clock) == 1
    assert await _marks(harness) == [held]
    told = await outbox.events(harness, held)
    assert [e["kind"] for e in told] == _HELD_KINDS
    for event in told:
        assert (event["project_id"], event["action_type"]) == ("p1", "test.target")
        payload = event["payload"]
        assert {k: payload[k] for k in ("dispatchId", "status", "attempt", "target")} == {
            "dispatchId": held,
            "status": "recovery_required",
            "attempt": 1,
            "target": "router-1",
        }
        assert (payload["resultCode"], payload["noticedBy"]) == (
            "command_exit_uncertain",
            "recovery_pass",
        )
        assert len(payload["actionDigest"]) == 64
        assert "router" not in payload  # the plan's members never reach a payload
    # A second pass observes the row again: the mark is written once, so is each event.
    assert await _pass(harness, clock) == 1
    assert await outbox.events(harness, held) == told
    # Settled, the row is told as any outcome is; the recovery is not told again.
    await resolving.resolve_manually(
        harness.operator_store,
        clock,
        held,
        resolution=states.Completion.FAILED,
        operator="olga",
        reason="checked_router",
    )
    assert await outbox.kinds(harness, held) == [*_HELD_KINDS, "dispatch.failed"]


async def test_a_dispatch_without_a_target_is_told_recovery_required_and_never_held(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert await _pass(harness, clock) == 1
    [event] = await outbox.events(harness, one.dispatch_id)
    assert event["kind"] == "dispatch.recovery_required"
    assert (event["payload"]["target"], event["payload"]["resultCode"]) == (None, None)
    assert event["payload"]["approvalRequestId"] == one.approval_request_id


async def test_a_settle_before_any_pass_tells_the_mark_it_writes(
    harness: Harness, clock: ManualClock
) -> None:
    held = await submit_change(harness.approver_store, clock, "act-1", "router-1")
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    await resolving.resolve_manually(
        harness.operator_store,
        clock,
        held,
        resolution=states.Completion.SUCCEEDED,
        operator="olga",
        reason="seen_on_router",
    )
    told = await outbox.events(harness, held)
    assert [e["kind"] for e in told] == [*_HELD_KINDS, "dispatch.succeeded"]
    assert {e["payload"]["noticedBy"] for e in told[:2]} == {"resolution"}


@pytest.mark.parametrize("targeted", [True, False])
async def test_a_mark_rolled_back_tells_nothing(
    harness: Harness, clock: ManualClock, targeted: bool
) -> None:
    """One statement records an observation of the expired row (the mark and its events are
    written by its triggers), then fails on its second row: none of it stays. The same
    observation alone writes the mark and its events."""
    dispatch = (
        await submit_change(harness.approver_store, clock, "act-1", "router-1")
        if targeted
        else (await submit_runs(harness.approver_store, clock, 1))[0].dispatch_id
    )
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS + 1)
    observe = (
        f"INSERT INTO {outbox.table(harness, 'recovery_observations')} (dispatch_id, outcome, "
        "reason_code, observation_count, first_seen_at_ms, last_seen_at_ms) "
        f"VALUES ('{dispatch}', 'missing', 'not_found', 1, 0, 0)"
    )
    # SQLite runs the row's triggers as it inserts it, then refuses the second row's CHECK;
    # PostgreSQL runs them at the statement's end, then refuses the second row's key.
    second = "'x', 'bogus'" if harness.dialect == "sqlite" else "'d-nobody', 'missing'"
    with pytest.raises(Exception):  # noqa: B017 - the driver's own refusal, either dialect
        await harness.raw(f"{observe}, ({second}, 'not_found', 1, 0, 0)")
    assert await _marks(harness) == []
    assert await outbox.events(harness, dispatch) == []
    await harness.raw(observe)
    assert await _marks(harness) == [dispatch]
    expected = _HELD_KINDS if targeted else _HELD_KINDS[:1]
    assert await outbox.kinds(harness, dispatch) == expected
