"""The notification outbox (docs/notifications.md), both dialects: every change worth telling a
person about writes its event in its own transaction, and a change not made writes none.

Each test names its kind; the outbox is read whole, so an event of another subject or a second
event of the same change fails it too.
"""

from __future__ import annotations

import time

import anyio
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors, states
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support import outbox
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.executions import claim_one, started
from tests.support.stores import Harness

_PLAN_MEMBERS = {"taskId", "taskRevision", "projectId"}
"""Members of a run.create plan: none may reach a payload (ids and digests only)."""


@pytest.fixture(autouse=True)
async def _someone_listens(harness: Harness) -> None:
    """The database keeps events only while a subscription exists (migration 0034)."""
    await outbox.someone_listens(harness)


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


def _assert_redacted(event: dict[str, object]) -> None:
    payload = event["payload"]
    assert isinstance(payload, dict)
    assert not _PLAN_MEMBERS & set(payload), payload
    assert not {"plan", "planJson", "plan_json"} & set(payload)


async def test_approval_requested_and_approved_are_told_with_ids_and_no_plan(
    harness: Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, now, 1)
    request = consumed.approval_request_id
    told = await outbox.events(harness)
    assert [(e["kind"], e["subject_id"]) for e in told] == [
        ("approval.requested", request),
        ("approval.approved", request),
    ]
    db_now = int(await harness.scalar(_db_now(harness)))
    for event in told:
        _assert_redacted(event)
        assert event["project_id"] == "proj-1"
        assert event["action_type"] == "run.create"
        assert db_now - 60_000 < event["at_ms"] <= db_now
        assert event["payload"]["approvalRequestId"] == request
        assert len(event["payload"]["actionDigest"]) == 64
    assert told[0]["id"] < told[1]["id"]
    # Consuming the approval made a dispatch: not an event worth telling anyone about.
    assert await outbox.kinds(harness, consumed.dispatch_id) == []


async def test_approval_rejected_is_told_and_a_refused_decision_tells_nothing(
    harness: Harness, now: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, now)
    created = await the_api.create_approval("run.create", _plan("act-rej"), requested_by="alice")
    request = created.approval_request_id
    assert await outbox.kinds(harness, request) == ["approval.requested"]
    await the_api.reject(request, decided_by="bob")
    assert await outbox.kinds(harness, request) == ["approval.requested", "approval.rejected"]
    with pytest.raises(errors.ApprovalError):
        await the_api.approve(request, decided_by="bob")
    assert await outbox.kinds(harness, request) == ["approval.requested", "approval.rejected"]


async def test_approval_expired_is_told_once_by_the_sweep(
    harness: Harness, now: ManualClock
) -> None:
    short = api.Api(harness.approver_store, now, api.Policy(approval_ttl_ms=20, max_attempts=5))
    created = await short.create_approval("run.create", _plan("act-exp"), requested_by="alice")
    request = created.approval_request_id
    await anyio.sleep(0.1)
    sweep = reconciler.Reconciler(harness.store, {}, now)
    assert (await sweep.reconcile_pass()).approvals_expired == 1
    assert (await sweep.reconcile_pass()).approvals_expired == 0
    assert await outbox.kinds(harness, request) == ["approval.requested", "approval.expired"]
    [expired] = (await outbox.events(harness, request))[1:]
    assert expired["payload"]["status"] == "expired"
    _assert_redacted(expired)


async def test_approval_expiring_is_told_with_its_reminder_and_its_policy(
    harness: Harness, now: ManualClock
) -> None:
    await harness.raw(
        f"INSERT INTO {outbox.table(harness, 'approval_policies')} (name, version, action_type, "
        "approvals_required, lifetime_ms, remind_before_ms"
        + (", written_by) " if harness.dialect == "sqlite" else ") ")
        + "VALUES ('short', 1, 'run.create', 1, 2000, 1500"
        + (", 'owner')" if harness.dialect == "sqlite" else ")")
    )
    created = await make_api(harness.approver_store, now).create_approval(
        "run.create", _plan("act-remind"), requested_by="alice"
    )
    request = created.approval_request_id
    assert await harness.store.remind_approvals() == []
    assert await outbox.kinds(harness, request) == ["approval.requested"]
    await anyio.sleep(0.6)
    assert await harness.store.remind_approvals() == [request]
    assert await harness.store.remind_approvals() == []
    told = await outbox.events(harness, request)
    assert [e["kind"] for e in told] == ["approval.requested", "approval.expiring"]
    for event in told:
        assert (event["payload"]["policy"], event["payload"]["policyVersion"]) == ("short", 1)
    [reminder] = await harness.raw(
        f"SELECT at_ms FROM {outbox.table(harness, 'approval_events')} "
        f"WHERE approval_request_id = '{request}'"
    )
    assert told[1]["at_ms"] >= reminder["at_ms"]


async def test_dispatch_succeeded_is_told_and_a_late_failure_tells_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    assert await outbox.kinds(harness, consumed.dispatch_id) == []
    done = await harness.store.complete(
        identity,
        mutation_id="done-1",
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )
    assert done.status is ExecutionStatus.SUCCEEDED
    late = await harness.store.complete(
        identity,
        mutation_id="done-2",
        completion=states.Completion.FAILED,
        result_code="late",
        now_ms=clock.now_ms(),
    )
    assert late.reason == "not_executing"
    [event] = await outbox.events(harness, consumed.dispatch_id)
    assert event["kind"] == "dispatch.succeeded"
    assert event["payload"] == {
        "dispatchId": consumed.dispatch_id,
        "approvalRequestId": consumed.approval_request_id,
        "actionRef": event["payload"]["actionRef"],
        "actionDigest": event["payload"]["actionDigest"],
        "status": "succeeded",
        "attempt": 1,
        "resultCode": "ok",
    }


async def test_dispatch_failed_is_told(harness: Harness, clock: ManualClock) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    identity = await started(harness, clock)
    await harness.store.complete(
        identity,
        mutation_id="done-1",
        completion=states.Completion.FAILED,
        result_code="http_500",
        now_ms=clock.now_ms(),
    )
    [event] = await outbox.events(harness, consumed.dispatch_id)
    assert (event["kind"], event["payload"]["resultCode"]) == ("dispatch.failed", "http_500")
    _assert_redacted(event)


async def test_dispatch_blocked_is_told_once_the_budget_is_spent_and_not_before(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    for attempt in (1, 2):
        claim = await claim_one(harness, clock)
        assert claim.lease is not None
        await harness.store.release_preflight(
            claim.lease,
            mutation_id=f"rel-{attempt}",
            kind=states.ReleaseKind.RETRY,
            result_code="transient",
            retry_at_ms=clock.now_ms() + 100,
            now_ms=clock.now_ms(),
        )
        # A retry is not an outcome: nothing is told until the budget is spent.
        expected = [] if attempt == 1 else ["dispatch.blocked"]
        assert await outbox.kinds(harness, consumed.dispatch_id) == expected
        clock.advance(ms=100)
    [event] = await outbox.events(harness, consumed.dispatch_id)
    assert (event["payload"]["attempt"], event["payload"]["resultCode"]) == (2, "transient")


async def test_a_change_rolled_back_tells_nothing(harness: Harness, clock: ManualClock) -> None:
    """A bulk submit refused whole writes no request, so no `approval.requested` either."""
    good = api.run_create_plan({"projectId": "proj-1", "taskId": "t-1", "taskRevision": 1})
    clash = api.run_create_plan(
        {"projectId": "proj-1", "taskId": "t-2", "taskRevision": 1, "actionRef": good.action_ref}
    )
    with pytest.raises(errors.ApprovalStateConflict):
        await make_api(harness.approver_store, clock).submit(
            [good, clash], requested_by="tester", approved_by="approver"
        )
    assert await outbox.events(harness) == []
    await submit_runs(harness.approver_store, clock, 2)
    requests = await harness.raw(
        f"SELECT approval_request_id FROM {outbox.table(harness, 'approval_requests')}"
    )
    told = [e for e in await outbox.events(harness) if e["kind"] == "approval.requested"]
    assert sorted(e["subject_id"] for e in told) == sorted(
        r["approval_request_id"] for r in requests
    )


async def test_a_claim_and_a_lease_tell_nothing(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    before = await outbox.events(harness)
    await harness.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=8, lease_ms=LEASE_MS)
    assert await outbox.events(harness) == before


def _db_now(h: Harness) -> str:
    if h.dialect == "sqlite":
        return "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    return "SELECT qinglong.db_now_ms()"
