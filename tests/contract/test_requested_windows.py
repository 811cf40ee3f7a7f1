"""The requester's narrowing of the execution window (docs/state-machine.md#windows-and-freezes),
on every dialect: the database writes the dispatch's window as the intersection of the
policy's and the request's, and refuses at submit a narrowing that can never open; the request
reads its narrowing back wherever approvers read it."""

from __future__ import annotations

import time

import pytest

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import (
    approval_views,
    approvals,
    errors,
    plan_previews,
    plans,
    waits,
)
from qinglong_dispatcher.usecases import approving, consuming, requesting
from tests.support import faults
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.stores import Harness
from tests.support.targets import MODELS, TARGET_TYPE, submit_change
from tests.support.windows import (
    SETTINGS,
    another_approver,
    database_now_ms,
    dispatch_window,
    execution,
    window_policy,
)

HOUR_MS = 3_600_000
SHOWN = plan_previews.shown_by_type(builtin.PLAN_MODELS)


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the windows."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> plans.AnyPlan:
    return plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": ref, "projectId": "p1", "router": None},
        models=MODELS,
    )


async def _request(
    h: Harness, clock: ManualClock, ref: str, narrowing: waits.Narrowing | None = None
) -> approvals.Approval:
    """Request one change as `tester`, narrowed or not."""
    return await requesting.request_approval(
        h.approver_store, clock, SETTINGS, _plan(ref), requested_by="tester", narrowing=narrowing
    )


async def _narrowed(h: Harness, clock: ManualClock, ref: str, narrowing: waits.Narrowing) -> str:
    """Request one change narrowed, approve it as another principal and consume it."""
    created = await _request(h, clock, ref, narrowing)
    other = await another_approver(h)
    try:
        await approving.approve(other, clock, created.approval_request_id, decided_by="approver")
    finally:
        await other.close()
    consumed = await consuming.consume(
        h.approver_store, clock, SETTINGS, created.approval_request_id
    )
    return consumed.dispatch_id


async def _requests(h: Harness) -> int:
    return int(await h.scalar(f"SELECT count(*) FROM {faults.table(h, 'approval_requests')}"))


async def test_without_a_policy_the_requesters_window_is_the_dispatchs(
    harness: Harness, now: ManualClock
) -> None:
    start = now.ms + HOUR_MS
    (consumed,) = await make_api(harness.approver_store, now).submit(
        [_plan("act-1")],
        requested_by="tester",
        approved_by="approver",
        not_before_ms=start,
        window_for_ms=2 * HOUR_MS,
    )
    assert await dispatch_window(harness, consumed.dispatch_id) == (start, start + 2 * HOUR_MS)
    row = await execution(harness, consumed.dispatch_id)
    assert (row["not_before_ms"], row["eligible_at_ms"]) == (start, start)
    # A plan without a narrowing still has no window at all.
    plain = await submit_change(harness.approver_store, now, "act-2", None)
    assert await dispatch_window(harness, plain) == (None, None)


async def test_a_span_without_a_start_counts_from_the_dispatch(
    harness: Harness, now: ManualClock
) -> None:
    before = await database_now_ms(harness)
    (consumed,) = await make_api(harness.approver_store, now).submit(
        [_plan("act-1")], requested_by="tester", approved_by="approver", window_for_ms=HOUR_MS
    )
    after = await database_now_ms(harness)
    not_before, not_after = await dispatch_window(harness, consumed.dispatch_id)
    assert not_before is None
    assert before + HOUR_MS <= not_after <= after + HOUR_MS


async def test_the_dispatchs_window_is_the_intersection_with_the_policys(
    harness: Harness, now: ManualClock
) -> None:
    await window_policy(harness, delay_ms=HOUR_MS, window_ms=2 * HOUR_MS)
    # Later start than the policy's, longer span: the start is the requester's, the end the
    # policy's (never widened).
    later = now.ms + 2 * HOUR_MS
    before = await database_now_ms(harness)
    first = await _narrowed(
        harness, now, "act-1", waits.Narrowing(not_before_ms=later, window_for_ms=30 * HOUR_MS)
    )
    after = await database_now_ms(harness)
    not_before, not_after = await dispatch_window(harness, first)
    assert not_before == later
    assert before + 3 * HOUR_MS <= not_after <= after + 3 * HOUR_MS
    # Earlier start than the policy's, shorter span: the start is the policy's (never earlier),
    # the end the requester's.
    early = now.ms - HOUR_MS
    second = await _narrowed(
        harness,
        now,
        "act-2",
        waits.Narrowing(not_before_ms=early, window_for_ms=2 * HOUR_MS + 60_000),
    )
    not_before, not_after = await dispatch_window(harness, second)
    assert before + HOUR_MS <= not_before <= after + HOUR_MS + 60_000
    assert not_after == early + 2 * HOUR_MS + 60_000
    row = await execution(harness, second)
    assert (row["not_before_ms"], row["not_after_ms"]) == (not_before, not_after)


async def test_a_window_that_ended_is_refused_before_anything_is_written(
    harness: Harness, now: ManualClock
) -> None:
    before = await _requests(harness)
    with pytest.raises(errors.WindowEmpty):
        await make_api(harness.approver_store, now).submit(
            [_plan("act-1")],
            requested_by="tester",
            approved_by="approver",
            not_before_ms=now.ms - 2 * HOUR_MS,
            window_for_ms=HOUR_MS,
        )
    assert await _requests(harness) == before


async def test_the_database_refuses_a_window_that_ends_before_the_policys_delay(
    harness: Harness, now: ManualClock
) -> None:
    """The caller cannot know the policy's delay: the database refuses, typed, all of it."""
    await window_policy(harness, delay_ms=2 * HOUR_MS)
    before = await _requests(harness)
    with pytest.raises(errors.WindowEmpty, match="before the policy lets it start"):
        await _request(harness, now, "act-1", waits.Narrowing(window_for_ms=HOUR_MS))
    assert await _requests(harness) == before
    # One that ends after the delay is admitted.
    admitted = await _request(harness, now, "act-2", waits.Narrowing(window_for_ms=3 * HOUR_MS))
    assert admitted.status.value == "pending"


async def test_the_python_api_refuses_a_span_out_of_bounds(
    harness: Harness, now: ManualClock
) -> None:
    with pytest.raises(errors.InvalidInput, match="between 1 second and 30 days"):
        await make_api(harness.approver_store, now).submit(
            [_plan("act-1")], requested_by="tester", approved_by="approver", window_for_ms=10
        )
    assert await _requests(harness) == 0


async def test_the_request_reads_its_narrowing_back_wherever_approvers_read_it(
    harness: Harness, now: ManualClock
) -> None:
    """What the approvers approve is the request with its narrowing: the request itself and
    each list they read (waiting, of one status, all) carry it, and a request without one
    carries none."""
    start = now.ms + HOUR_MS
    narrowed = await _request(
        harness, now, "act-1", waits.Narrowing(not_before_ms=start, window_for_ms=2 * HOUR_MS)
    )
    spanned = await _request(harness, now, "act-2", waits.Narrowing(window_for_ms=HOUR_MS))
    plain = await _request(harness, now, "act-3")
    wanted = {
        narrowed.approval_request_id: (start, 2 * HOUR_MS),
        spanned.approval_request_id: (None, HOUR_MS),
        plain.approval_request_id: (None, None),
    }
    for approval_id, window in wanted.items():
        found = await harness.approver_store.get_approval(approval_id)
        assert found is not None
        assert (found.not_before_ms, found.window_for_ms) == window
    for status in (approval_views.WAITING, approval_views.ALL):
        page = await harness.approver_store.list_waiting_approvals(
            approval_views.ListQuery(status=status), now_ms=now.ms, shown=SHOWN
        )
        listed = {
            row.approval_request_id: (row.not_before_ms, row.window_for_ms)
            for row in page.approvals
        }
        assert listed == wanted, status
    other = await another_approver(harness)
    try:
        await approving.approve(other, now, narrowed.approval_request_id, decided_by="approver")
    finally:
        await other.close()
    page = await harness.approver_store.list_waiting_approvals(
        approval_views.ListQuery(status="approved"), now_ms=now.ms, shown=SHOWN
    )
    assert [(r.not_before_ms, r.window_for_ms) for r in page.approvals] == [(start, 2 * HOUR_MS)]
