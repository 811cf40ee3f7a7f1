"""`POST /api/v1/dispatches/{id}/resubmit` on both dialects, over a real listener with real
tokens: a cancelled (or failed, or blocked) dispatch becomes a new pending request for the same
plan under a new action ref, requested by the token's principal; plans sealed at rest are
sealed again under the new ref; a viewer is refused and nothing is written; a dispatch still
moving is `resubmit_refused`; an `Idempotency-Key` answers the first request again."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher.domain import canonical, errors, fencing, principals, records, states
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from qinglong_dispatcher.usecases import resubmitting
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, assert_problem, serving
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.ui_client import UiClient

MARKER = "customer-5e1d0b-marker"


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def _cancelled(it: Served, project: str = "shop") -> str:
    (consumed,) = await submit_runs(it.harness.approver_store, it.clock, 1, project=project)
    status, _, body = await it.call(
        "POST", f"/dispatches/{consumed.dispatch_id}/cancel", "carol", {"reason": "wrong_time"}
    )
    assert status == 200, body
    return consumed.dispatch_id


async def _plan_rows(it: Served, project: str) -> list[dict[str, Any]]:
    return await it.harness.raw(
        f"SELECT action_ref, plan_json, plan_key_id, plan_sealed FROM {it.table('action_plans')} "
        f"WHERE project_id = '{project}' ORDER BY action_ref"
    )


async def test_a_cancelled_dispatch_is_requested_again_as_a_new_pending_request(
    served: Served,
) -> None:
    it = served
    dispatch_id = await _cancelled(it)
    (old,) = await _plan_rows(it, "shop")
    status, headers, body = await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "sam")
    assert status == 201, body
    approval = body["approval"]
    assert body["resubmitted_from"] == dispatch_id
    assert approval["status"] == "pending"
    assert approval["requested_principal"] == it.names["sam"]
    assert approval["action_ref"] != json.loads(old["plan_json"])["actionRef"]
    # The same plan: only its action ref differs.
    rows = {r["action_ref"]: r for r in await _plan_rows(it, "shop")}
    new = json.loads(rows[approval["action_ref"]]["plan_json"])
    before = json.loads(old["plan_json"])
    assert new.pop("actionRef") == approval["action_ref"]
    before.pop("actionRef")
    assert canonical.dumps(new) == canonical.dumps(before)
    audit = await it.audit(approval["approval_request_id"])
    assert [(r["kind"], r["principal"], r["request_id"]) for r in audit] == [
        ("approval.created", it.names["sam"], None),
        ("api.create", it.names["sam"], headers["X-Request-Id"]),
    ]
    # Nothing runs: the old dispatch stays cancelled and no dispatch was made.
    status, _, shown = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert shown["execution"]["status"] == "cancelled"
    dispatches = await it.harness.raw(
        f"SELECT count(*) AS n FROM {it.table('approved_action_dispatches')}"
    )
    assert dispatches == [{"n": 1}]
    # Once approved it is a dispatch of its own.
    status, _, approved = await it.call(
        "POST", f"/approvals/{approval['approval_request_id']}/approve", "alice"
    )
    assert status == 200, approved
    assert approved["dispatch_id"] != dispatch_id


async def test_the_new_request_and_its_origin_link_each_other(served: Served) -> None:
    it = served
    dispatch_id = await _cancelled(it)
    status, _, body = await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "sam")
    assert status == 201, body
    again = body["approval"]["approval_request_id"]
    assert body["approval"]["resubmitted_from"] == dispatch_id
    _, _, shown = await it.call("GET", f"/approvals/{again}", "vic")
    assert (shown["approval"]["resubmitted_from"], shown["approval"]["requested_again"]) == (
        dispatch_id,
        [],
    )
    _, _, origin = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
    assert (origin["resubmitted_from"], origin["requested_again"]) == (None, [again])
    status, _, approved = await it.call("POST", f"/approvals/{again}/approve", "alice")
    assert status == 200, approved
    _, _, renewed = await it.call("GET", f"/dispatches/{approved['dispatch_id']}", "vic")
    assert (renewed["resubmitted_from"], renewed["requested_again"]) == (dispatch_id, [])
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, page = await ui.get(f"/ui/dispatches/{dispatch_id}")
        assert "<dt>requested again as</dt>" in page
        assert f'<a href="/ui/approvals/{again}">{again}</a>' in page
        _, _, page = await ui.get(f"/ui/approvals/{again}")
        assert "<dt>requested again from</dt>" in page
        assert f'<a href="/ui/dispatches/{dispatch_id}">{dispatch_id}</a>' in page


async def test_a_sealed_plan_is_sealed_again_under_its_new_action_ref(
    served: Served, tmp_path: Path
) -> None:
    it = served
    ring = tmp_path / "plan-keys"
    plan_keyring.generate(ring)
    envelopes = plan_envelopes.from_keyring(ring)
    for store in (it.harness.store, it.harness.approver_store, it.ctx.store, it.ctx.acting):
        store.envelopes = envelopes  # type: ignore[union-attr]
    await it.harness.register_plan_keys(*envelopes.key_ids)
    dispatch_id = await _cancelled(it, project=MARKER)
    status, _, body = await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "sam")
    assert status == 201, body
    rows = await _plan_rows(it, MARKER)
    assert len(rows) == 2
    for row in rows:
        assert row["plan_json"] == ""
        assert row["plan_key_id"] == plan_keyring.load(ring).active
        assert b"taskId" not in bytes(row["plan_sealed"])
    # It opens under its own row (the associated data binds the new ref) and previews alike.
    new_id = body["approval"]["approval_request_id"]
    status, _, shown = await it.call("GET", f"/approvals?project={MARKER}", "vic")
    assert status == 200, shown
    (waiting,) = shown["approvals"]
    assert waiting["approval_request_id"] == new_id
    plan = waiting["plan"]
    assert (plan["taskId"], plan["actionRef"]) == ("task-0", body["approval"]["action_ref"])


async def test_who_may_and_what_may_be_requested_again(served: Served) -> None:
    it = served
    dispatch_id = await _cancelled(it)
    before = await it.everything()
    assert_problem(
        await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "vic"), 403, "forbidden"
    )
    assert await it.everything() == before
    (pending,) = await submit_runs(it.harness.approver_store, it.clock, 1, project="shop")
    after_submit = await it.everything()
    assert_problem(
        await it.call("POST", f"/dispatches/{pending.dispatch_id}/resubmit", "sam"),
        409,
        "resubmit_refused",
    )
    assert_problem(
        await it.call("POST", "/dispatches/d-nosuch/resubmit", "sam"), 404, "dispatch_not_found"
    )
    assert_problem(
        await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "sam", {"plan": {}}),
        400,
        "invalid_input",
    )
    assert await it.everything() == after_submit


async def test_an_idempotency_key_answers_the_first_request_again(served: Served) -> None:
    it = served
    first, second = await _cancelled(it), await _cancelled(it)
    key = {"Idempotency-Key": "again-1"}
    status, _, body = await it.call("POST", f"/dispatches/{first}/resubmit", "sam", headers=key)
    assert status == 201, body
    status, headers, replayed = await it.call(
        "POST", f"/dispatches/{first}/resubmit", "sam", headers=key
    )
    assert (status, headers.get("Idempotent-Replayed")) == (201, "true")
    assert replayed == body
    assert_problem(
        await it.call("POST", f"/dispatches/{second}/resubmit", "sam", headers=key),
        422,
        "idempotency_key_reused",
    )
    pending = await it.harness.raw(
        f"SELECT count(*) AS n FROM {it.table('approval_requests')} WHERE status = 'pending'"
    )
    assert pending == [{"n": 1}]


async def test_the_store_refuses_a_viewer_even_past_the_route(served: Served) -> None:
    """Hostile: the route's guard skipped, the viewer's own store (on PostgreSQL the API's
    login become the viewer's role) writes the request: the database refuses it (SQLSTATE
    42501 on PostgreSQL, the permission table on SQLite) and nothing changes."""
    it = served
    dispatch_id = await _cancelled(it)
    viewer = principals.Authenticated(
        token_id=it.token_ids["vic"], principal=it.names["vic"], role=principals.TokenRole.VIEWER
    )
    stores_of = it.ctx.acting if it.ctx.acting is not None else it.ctx.store
    acting = await stores_of.acting_as(viewer)
    before = await it.everything()
    with pytest.raises(errors.QinglongError) as refused:
        await resubmitting.resubmit(
            it.ctx.store,
            acting,
            it.clock,
            it.ctx.policy,
            dispatch_id,
            requested_by=it.names["vic"],
        )
    expected = "permission_denied" if it.harness.dialect == "postgres" else "approval_not_permitted"
    assert refused.value.code == expected
    if it.harness.dialect == "postgres":
        assert "permission denied" in str(refused.value)
    assert await it.everything() == before


async def _started(it: Served, clock: ManualClock) -> records.ExecutionIdentity:
    await submit_runs(it.harness.approver_store, clock, 1, project="shop")
    _, identity = await started_execution(it.harness, clock)
    return identity


async def test_failed_and_blocked_are_requested_again_and_unknown_or_done_are_not(
    served: Served,
) -> None:
    it = served
    for completion in (states.Completion.FAILED, states.Completion.BLOCKED):
        identity = await _started(it, it.clock)
        await it.harness.store.complete(
            identity,
            mutation_id=fencing.mutation_id(identity.dispatch_id, identity.attempt, "complete"),
            completion=completion,
            result_code="target_down",
            now_ms=it.clock.now_ms(),
        )
        status, _, body = await it.call(
            "POST", f"/dispatches/{identity.dispatch_id}/resubmit", "sam"
        )
        assert status == 201, (completion, body)
        assert body["resubmitted_from"] == identity.dispatch_id
    # A recovery_required one is settled first; a succeeded one is done.
    stuck = await _started(it, ManualClock(it.clock.now_ms() - 3_600_000))
    done = await _started(it, it.clock)
    await it.harness.store.complete(
        done,
        mutation_id=fencing.mutation_id(done.dispatch_id, done.attempt, "complete"),
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=it.clock.now_ms(),
    )
    before = await it.everything()
    for dispatch_id in (stuck.dispatch_id, done.dispatch_id):
        assert_problem(
            await it.call("POST", f"/dispatches/{dispatch_id}/resubmit", "sam"),
            409,
            "resubmit_refused",
        )
    assert await it.everything() == before
