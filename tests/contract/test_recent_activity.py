"""The event stream's read, on every dialect: new approval requests and settled dispatches at
or after a time, oldest first, bounded."""

from __future__ import annotations

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import activity
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness


async def test_requests_and_settled_dispatches_since_a_time(
    harness: Harness, clock: ManualClock
) -> None:
    h = harness
    before = clock.now_ms()
    (old,) = await submit_runs(h.approver_store, clock, 1, project="old")
    await make_dispatcher(h.store, clock).dispatch_batch()
    clock.advance(ms=5_000)
    since = clock.now_ms()
    plan = api.run_create_plan({"projectId": "new", "taskId": "t", "taskRevision": 1})
    waiting = await make_api(h.approver_store, clock).create_approval(
        "run.create", plan.to_canonical_dict(), requested_by="alice"
    )
    (new,) = await submit_runs(h.approver_store, clock, 1, project="new")
    clock.advance(ms=10)
    await make_dispatcher(h.store, clock).dispatch_batch()

    found = await h.store.recent_activity(
        requested_since_ms=since, settled_since_ms=since, limit=10
    )
    assert {r.approval_request_id for r in found.requested} == {
        waiting.approval_request_id,
        new.approval_request_id,
    }
    assert all(r.created_at_ms >= since for r in found.requested)
    (settled,) = found.settled
    assert (settled.dispatch_id, settled.status, settled.project_id) == (
        new.dispatch_id,
        "succeeded",
        "new",
    )
    assert settled.settled_at_ms == since + 10
    everything = await h.store.recent_activity(
        requested_since_ms=before, settled_since_ms=before, limit=10
    )
    assert old.dispatch_id in {s.dispatch_id for s in everything.settled}
    assert [s.settled_at_ms for s in everything.settled] == sorted(
        s.settled_at_ms for s in everything.settled
    )
    one = await h.store.recent_activity(requested_since_ms=before, settled_since_ms=before, limit=1)
    assert (len(one.requested), len(one.settled), one.limit) == (1, 1, 1)
    assert one.settled[0].dispatch_id == old.dispatch_id
    assert activity.approval_id_floor(since) <= min(r.approval_request_id for r in found.requested)
