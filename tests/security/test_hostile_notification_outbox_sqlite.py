"""The notification outbox on an edge file, by a plain `sqlite3` connection.

A file has no roles: whoever opens it may write. What the triggers still refuse: an event for a
change not made (or not made to that subject, project or action type), a second event of one
change, one not at the file's time, and any change or deletion. Each attack asserts the
trigger's or the key's own abort and that nothing changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher import bootstrap
from tests.support import outbox, refusals, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import started_execution

_NOW = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
_HELD = "an event is written with its change"


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


@pytest.fixture(autouse=True)
async def _someone_listens(edge: stores.Harness) -> None:
    """The database keeps events only while a subscription exists (migration 0034)."""
    await outbox.someone_listens(edge)


def _forge(kind: str, subject: str, *, project: str = "proj-1", at: str = _NOW) -> str:
    return (
        "INSERT INTO notification_events (kind, subject_id, project_id, action_type, at_ms, "
        f"payload_json) VALUES ('{kind}', '{subject}', '{project}', 'run.create', {at}, '{{}}')"
    )


async def _snapshot(h: stores.Harness) -> list[Any]:
    return await outbox.events(h)


async def test_an_event_for_a_change_not_made_is_refused(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    request, dispatch = consumed.approval_request_id, consumed.dispatch_id
    before = await _snapshot(edge)
    for attack in (
        _forge("approval.requested", "a-nobody"),
        _forge("approval.rejected", request),  # it was approved
        _forge("approval.expired", request),
        _forge("approval.expiring", request),  # no reminder was written
        _forge("dispatch.failed", dispatch),  # it is pending
        _forge("dispatch.succeeded", dispatch),
        _forge("dispatch.blocked", dispatch),
        _forge("dispatch.failed", request),  # not a dispatch at all
    ):
        assert _HELD in await refusals.sqlite_abort(edge, attack), attack
        assert await _snapshot(edge) == before


async def test_a_second_event_of_one_change_or_one_out_of_time_is_refused(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    request = consumed.approval_request_id
    before = await _snapshot(edge)
    # The change holds, and its trigger already told it: the key refuses a second event.
    abort = await refusals.sqlite_abort(edge, _forge("approval.requested", request))
    assert "UNIQUE constraint failed" in abort
    # The request was approved and then consumed: no longer the change an event tells of.
    assert _HELD in await refusals.sqlite_abort(edge, _forge("approval.approved", request))
    # Another project's name, or a time not the file's, is refused before the key.
    assert _HELD in await refusals.sqlite_abort(
        edge, _forge("approval.requested", request, project="proj-2")
    )
    for at in (f"{_NOW} - 60000", f"{_NOW} + 60000"):
        abort = await refusals.sqlite_abort(edge, _forge("approval.requested", request, at=at))
        assert _HELD in abort, at
    assert await _snapshot(edge) == before


async def test_an_event_never_changes_and_is_not_deleted_before_it_is_done(
    edge: stores.Harness, clock: ManualClock
) -> None:
    await submit_runs(edge.approver_store, clock, 1)
    before = await _snapshot(edge)
    assert len(before) == 2
    for attack, message in (
        ("UPDATE notification_events SET payload_json = '{}'", "an event never changes"),
        ("UPDATE notification_events SET kind = 'approval.rejected'", "an event never changes"),
        # The target is the database's (the plan's or the dispatch's), written once.
        ("UPDATE notification_events SET target = 'router-9'", "an event never changes"),
        # Not matched yet: only a delivered or dead-lettered event is pruned (migration 0038).
        ("DELETE FROM notification_events", "an event goes only once matched"),
    ):
        assert message in await refusals.sqlite_abort(edge, attack), attack
        assert await _snapshot(edge) == before


async def test_a_recovery_or_a_held_target_not_marked_is_refused(
    edge: stores.Harness, clock: ManualClock
) -> None:
    """Told only of a dispatch the database marked `recovery_required`, `target.held` only of
    one with a target; the mark's own events already hold the key."""
    untargeted = (await submit_runs(edge.approver_store, clock, 1))[0].dispatch_id
    await started_execution(edge, clock)
    clock.advance(ms=LEASE_MS + 1)
    assert (await bootstrap.build_reconciler(edge.store, clock).reconcile_pass()).observed == 1
    waiting = (await submit_runs(edge.approver_store, clock, 1))[0].dispatch_id
    before = await _snapshot(edge)
    for attack in (
        _forge("dispatch.recovery_required", waiting),  # never marked
        _forge("target.held", waiting),
        _forge("target.held", untargeted),  # marked, but holds no target
        _forge("dispatch.recovery_required", untargeted, project="proj-2"),
    ):
        assert _HELD in await refusals.sqlite_abort(edge, attack), attack
        assert await _snapshot(edge) == before
    abort = await refusals.sqlite_abort(edge, _forge("dispatch.recovery_required", untargeted))
    assert "UNIQUE constraint failed" in abort
    assert await _snapshot(edge) == before
