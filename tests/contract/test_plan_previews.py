"""Plans as approvers see them, on every dialect: `approval list` pages the waiting requests
with their redacted previews, a plan that does not open shows null with its code, and the whole
plan is read only with its audit row in the same transaction."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import approval_views, errors, ids, plan_previews, plans
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from tests.support import stores
from tests.support.actions import DEFAULT_TTL_MS, make_api, submit_runs
from tests.support.clock import ManualClock

MARKER = "customer-51c0-marker"
SHOWN = plan_previews.shown_by_type(builtin.PLAN_MODELS)


def _http_plan(body: str) -> plans.AnyPlan:
    return plans.parse_plan(
        "http.request",
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": "p1",
            "receiver": "orders",
            "method": "POST",
            "path": "/orders",
            "query": [["email", MARKER]],
            "headers": [["x-customer", MARKER]],
            "body": base64.b64encode(body.encode()).decode(),
            "contentType": "application/json",
        },
        models=builtin.PLAN_MODELS,
    )


def _api(store: ports.Store, clock: ManualClock) -> api.Api:
    return api.Api(
        store,
        clock,
        api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
        installed_plan_models=lambda: builtin.PLAN_MODELS,
    )


async def _list_all(
    store: ports.Store, clock: ManualClock, **filters: Any
) -> list[approval_views.WaitingApproval]:
    rows: list[approval_views.WaitingApproval] = []
    after = None
    while True:
        request = approval_views.ListQuery(limit=2, after=after, **filters)
        page = await store.list_waiting_approvals(request, now_ms=clock.now_ms(), shown=SHOWN)
        rows += page.approvals
        if page.next is None:
            return rows
        after = page.next


async def test_approval_list_pages_the_waiting_requests_newest_first_with_their_previews(
    harness: stores.Harness, clock: ManualClock
) -> None:
    the_api = _api(harness.approver_store, clock)
    body = '{"order": "' + MARKER + '"}'
    waiting = []
    for _ in range(3):
        plan = _http_plan(body)
        waiting.append(
            await the_api.create_approval(
                "http.request", plan.to_canonical_dict(), requested_by="alice"
            )
        )
        clock.advance(ms=1)
    await submit_runs(harness.approver_store, clock, 1)  # consumed: not waiting
    rejected = await make_api(harness.approver_store, clock).create_approval(
        "run.create", api.run_create_plan({"projectId": "p1", "taskId": "t", "taskRevision": 1})
        .to_canonical_dict(), requested_by="alice",
    )  # fmt: skip
    await the_api.reject(rejected.approval_request_id, decided_by="alice")

    listed = await _list_all(harness.approver_store, clock)
    assert [row.approval_request_id for row in listed] == [
        a.approval_request_id for a in reversed(waiting)
    ]
    first = listed[0]
    assert (first.action_type, first.requested_by, first.project_id) == (
        "http.request",
        "alice",
        "p1",
    )
    assert first.expires_at_ms == first.created_at_ms + DEFAULT_TTL_MS
    assert first.plan is not None
    assert first.plan_code is None
    assert (first.plan["receiver"], first.plan["method"], first.plan["path"]) == (
        "orders",
        "POST",
        "/orders",
    )
    assert MARKER not in repr([row.as_dict() for row in listed])
    # The same body in two requests: the same digest prefix, so an approver can compare them.
    assert len({str(row.plan["body"]) for row in listed if row.plan}) == 1
    assert await _list_all(harness.approver_store, clock, action_type="run.create") == []
    assert await _list_all(harness.approver_store, clock, project_id="elsewhere") == []
    # Once their lifetime ran out (the caller's clock), they no longer wait.
    clock.advance(ms=DEFAULT_TTL_MS)
    assert await _list_all(harness.approver_store, clock) == []


async def test_a_cursor_or_limit_out_of_range_is_refused_before_the_store() -> None:
    with pytest.raises(errors.InvalidInput, match="limit"):
        approval_views.ListQuery(limit=501)
    with pytest.raises(errors.InvalidInput, match="cursor"):
        approval_views.Cursor.parse("12:../x")


async def test_a_sealed_plan_without_its_key_shows_null_with_its_code(
    harness: stores.Harness, clock: ManualClock, tmp_path: Path
) -> None:
    ring = tmp_path / "plan-keys"
    plan_keyring.generate(ring)
    with_ring = plan_envelopes.from_keyring(ring)
    for store in (harness.approver_store, harness.operator_store):
        store.envelopes = with_ring  # type: ignore[misc]
    await harness.register_plan_keys(*with_ring.key_ids)
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    await make_api(harness.approver_store, clock).create_approval(
        "run.create",
        api.run_create_plan(
            {"projectId": "p1", "taskId": "t", "taskRevision": 1}
        ).to_canonical_dict(),
        requested_by="alice",
    )
    reader = await harness.open_another()  # no key ring
    detail = await reader.show_dispatch(consumed.dispatch_id, now_ms=clock.now_ms(), shown=SHOWN)
    assert detail is not None
    assert (detail.plan, detail.plan_code) == (None, plan_envelopes.KEYRING_MISSING)
    assert detail.as_dict()["plan"] is None
    (row,) = await _list_all(reader, clock)
    assert (row.plan, row.plan_code) == (None, plan_envelopes.KEYRING_MISSING)
    # With the ring, the same rows preview.
    opened = await harness.operator_store.show_dispatch(
        consumed.dispatch_id, now_ms=clock.now_ms(), shown=SHOWN
    )
    assert opened is not None
    assert opened.plan is not None
    assert opened.plan["taskId"] == "task-0"


async def test_on_edge_the_whole_plan_is_read_with_its_audit_row(
    tmp_path_factory: pytest.TempPathFactory, clock: ManualClock
) -> None:
    async with stores.open_harness("sqlite", tmp_path_factory) as edge:
        the_api = _api(edge.store, clock)
        (consumed,) = await the_api.submit(
            [_http_plan("{}")], requested_by="alice", approved_by="bob"
        )
        before = await edge.scalar("SELECT count(*) FROM security_audit_events")
        assert await edge.store.read_full_plan("d-unknown") is None
        assert await edge.scalar("SELECT count(*) FROM security_audit_events") == before
        found = await edge.store.read_full_plan(consumed.dispatch_id)
        assert found is not None
        assert MARKER in found.plan_json
        audit = await edge.raw(
            "SELECT kind, actor, principal, subject_id, detail_code FROM security_audit_events "
            "WHERE event_id > (SELECT max(event_id) - 1 FROM security_audit_events)"
        )
        principal = edge.store.approver.name
        assert audit == [
            {
                "kind": "plan.read",
                "actor": principal,
                "principal": principal,
                "subject_id": consumed.dispatch_id,
                "detail_code": "http.request",
            }
        ]
        assert MARKER not in repr(await edge.raw("SELECT * FROM security_audit_events"))
