"""Plans encrypted at rest, on every dialect: sealed as they are written, opened as they are
read, never opened in the wrong row or without the key, rotated in resumable batches, checked."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import errors, plan_previews, plans
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from tests.support import stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

MARKER = "customer-7f3a9c-marker"


async def _use(harness: stores.Harness, envelopes: plan_envelopes.Envelopes) -> None:
    """Every store of the harness seals and opens with `envelopes` (as one process's would)."""
    for store in {id(s): s for s in (harness.store, harness.approver_store)}.values():
        store.envelopes = envelopes  # type: ignore[misc]
    # Its keys registered, as `migrate` with the ring does (the owner's to do).
    await harness.register_plan_keys(*envelopes.key_ids)


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    path = tmp_path / "plan-keys"
    plan_keyring.generate(path)
    return path


@pytest.fixture
async def sealed_harness(harness: stores.Harness, ring: Path) -> stores.Harness:
    await _use(harness, plan_envelopes.from_keyring(ring))
    return harness


def _table(harness: stores.Harness) -> str:
    return "action_plans" if harness.dialect == "sqlite" else "qinglong.action_plans"


async def _rows(harness: stores.Harness) -> list[dict[str, Any]]:
    return await harness.raw(
        f"SELECT project_id, action_ref, plan_json, plan_key_id, plan_sealed FROM {_table(harness)}"
        " ORDER BY project_id, action_ref"
    )


async def test_a_plan_is_sealed_under_the_active_key_and_opens_for_its_dispatch(
    sealed_harness: stores.Harness, clock: ManualClock, ring: Path
) -> None:
    h = sealed_harness
    (consumed,) = await submit_runs(h.approver_store, clock, 1, project=MARKER)
    (row,) = await _rows(h)
    assert row["plan_json"] == ""
    assert row["plan_key_id"] == plan_keyring.load(ring).active
    assert MARKER.encode() not in bytes(row["plan_sealed"])
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"succeeded": 1}
    shown = plan_previews.shown_by_type(builtin.PLAN_MODELS)
    detail = await h.store.show_dispatch(consumed.dispatch_id, now_ms=clock.now_ms(), shown=shown)
    assert detail is not None
    assert detail.plan is not None
    assert detail.plan["taskId"] == "task-0"


async def test_a_ciphertext_moved_to_another_row_does_not_open_and_is_blocked(
    sealed_harness: stores.Harness, clock: ManualClock
) -> None:
    h = sealed_harness
    first, second = await submit_runs(h.approver_store, clock, 2)
    rows = await _rows(h)
    # The one change a plan row admits is a reseal: here, the other row's envelope.
    donor, victim = rows[0], rows[1]
    sealed = "x'" + bytes(donor["plan_sealed"]).hex() + "'"
    if h.dialect == "postgres":
        sealed = "'\\x" + bytes(donor["plan_sealed"]).hex() + "'::bytea"
    await h.raw(
        f"UPDATE {_table(h)} SET plan_sealed = {sealed} "
        f"WHERE project_id = '{victim['project_id']}' AND action_ref = '{victim['action_ref']}'"
    )
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes.get("succeeded") == 1
    assert report.outcomes.get("blocked") == 1
    for consumed in (first, second):
        execution = await h.store.get_execution(consumed.dispatch_id)
        assert execution is not None
        if execution.status is ExecutionStatus.BLOCKED:
            assert execution.result_code == "plan_decrypt_failed"


async def test_a_process_without_the_ring_blocks_a_sealed_plan_and_never_runs_it(
    sealed_harness: stores.Harness, clock: ManualClock
) -> None:
    h = sealed_harness
    (consumed,) = await submit_runs(h.approver_store, clock, 1)
    await _use(h, plan_envelopes.Envelopes(None))
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"blocked": 1}
    execution = await h.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert execution.result_code == plan_envelopes.KEYRING_MISSING
    assert (
        await h.scalar(
            "SELECT count(*) FROM " + ("runs" if h.dialect == "sqlite" else "qinglong.runs")
        )
        == 0
    )


async def test_rotation_reseals_clear_and_old_plans_in_resumable_batches(
    harness: stores.Harness, clock: ManualClock, ring: Path
) -> None:
    h = harness
    await submit_runs(h.approver_store, clock, 3, project="clear")  # written before any ring
    await _use(h, plan_envelopes.from_keyring(ring))
    await submit_runs(h.approver_store, clock, 2, project="old-key")
    new_ring = plan_keyring.add_key(ring)
    await _use(h, plan_envelopes.from_keyring(ring))
    owner = await h.owner()  # resealing is the owner's (`keys rotate` as the administrator)
    owner.envelopes = plan_envelopes.from_keyring(ring)  # type: ignore[misc]
    first = await owner.reseal_plans(limit=2)
    assert (first.resealed, first.remaining) == (2, 3)
    assert first.after is not None
    # Stopped here (a SIGKILL between batches loses nothing: each batch is one transaction).
    rest = await owner.reseal_plans(limit=10, after=first.after)
    assert (rest.resealed, rest.remaining, rest.after) == (3, 0, None)
    rows = await _rows(h)
    assert {r["plan_key_id"] for r in rows} == {new_ring.active}
    assert all(r["plan_json"] == "" for r in rows)
    check = await h.store.check_plans(limit=100)
    assert (check.checked, check.clear, check.failed) == (5, 0, {})
    assert check.by_key == {new_ring.active: 5}
    # Each plan still executes as approved.
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"succeeded": 5}


async def test_check_reports_plans_that_do_not_open_by_code(
    sealed_harness: stores.Harness, clock: ManualClock, tmp_path: Path
) -> None:
    h = sealed_harness
    await submit_runs(h.approver_store, clock, 2)
    other = tmp_path / "other-ring"
    plan_keyring.generate(other)
    await _use(h, plan_envelopes.from_keyring(other))
    check = await h.store.check_plans(limit=100)
    assert check.failed == {"plan_key_unknown": 2}
    owner = await h.owner()
    owner.envelopes = plan_envelopes.from_keyring(other)  # type: ignore[misc]
    batch = await owner.reseal_plans(limit=100)
    assert (batch.resealed, batch.unreadable) == (0, 2)


async def test_an_http_request_body_is_sealed_and_sent_as_approved(
    sealed_harness: stores.Harness, clock: ManualClock
) -> None:
    h = sealed_harness
    body = f'{{"note":"{MARKER}"}}'.encode()
    from qinglong_dispatcher.actions.http_request import plan as http_plan

    plan = plans.parse_plan(
        "http.request",
        {
            "schemaVersion": 1,
            "actionRef": "silence-1",
            "projectId": "p1",
            "receiver": "hooks",
            "method": "POST",
            "path": "/hooks/x",
            "query": [],
            "headers": [],
            "body": base64.b64encode(body).decode(),
            "contentType": "application/json",
        },
        models={"http.request": http_plan.HttpRequestPlan},
    )
    (consumed,) = await make_api(h.approver_store, clock).submit(
        [plan], requested_by="tester", approved_by="approver"
    )
    (row,) = await _rows(h)
    encoded = base64.b64encode(body)
    assert encoded not in bytes(row["plan_sealed"])
    assert row["plan_json"] == ""
    stored = await h.store.get_plan("p1", "silence-1")
    assert stored is not None
    assert encoded.decode() in stored.plan_json  # what the handler reads: the exact body
    assert consumed.action_ref == "silence-1"


# -- the start check: the owner's registered keys decide, one plan only blocks itself ---------


async def test_a_plan_that_does_not_open_blocks_itself_and_the_start_check_lets_the_rest_run(
    sealed_harness: stores.Harness, clock: ManualClock, tmp_path: Path
) -> None:
    h = sealed_harness
    await submit_runs(h.approver_store, clock, 2, project="ours")
    # The newest plan is sealed under a key the owner registered but this ring lacks (retired
    # from the ring too early): once, that stopped every process at its start.
    other = tmp_path / "other-ring"
    plan_keyring.generate(other)
    stranger = plan_envelopes.from_keyring(other)
    await h.register_plan_keys(*stranger.key_ids)
    elsewhere = await h.open_another() if h.dialect == "sqlite" else h.approver_store
    elsewhere.envelopes = stranger  # type: ignore[misc]
    clock.advance(ms=1_000)
    (foreign,) = await submit_runs(elsewhere, clock, 1, project="zz-foreign")
    probe = await h.store.probe_plan_keys()
    assert probe.not_in_ring == tuple(sorted(stranger.key_ids))
    assert probe.newest_unreadable == "plan_key_unknown"
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"succeeded": 2, "blocked": 1}
    blocked = await h.store.get_execution(foreign.dispatch_id)
    assert blocked is not None
    assert blocked.result_code == "plan_key_unknown"


async def test_the_start_check_refuses_no_ring_another_ring_and_an_unregistered_key(
    sealed_harness: stores.Harness, clock: ManualClock, ring: Path, tmp_path: Path
) -> None:
    h = sealed_harness
    await submit_runs(h.approver_store, clock, 1)
    other = tmp_path / "other-ring"
    plan_keyring.generate(other)
    added = tmp_path / "added-ring"
    await anyio.to_thread.run_sync(shutil.copy, ring, added)  # mode 0600 too
    plan_keyring.add_key(added)  # a new active key, not registered yet
    for envelopes, code in (
        (plan_envelopes.Envelopes(None), "plan_keyring_missing"),
        (plan_envelopes.from_keyring(other), "plan_key_unknown"),
        (plan_envelopes.from_keyring(added), "plan_key_unregistered"),
    ):
        h.store.envelopes = envelopes  # type: ignore[misc]
        with pytest.raises(errors.ConfigurationError) as refused:
            await h.store.probe_plan_keys()
        assert refused.value.code == code
    # The owner registers the added key (`migrate` with the ring): the same ring now starts.
    owner = await h.owner()
    owner.envelopes = plan_envelopes.from_keyring(added)  # type: ignore[misc]
    assert await owner.register_plan_keys(now_ms=clock.now_ms()) == [
        plan_keyring.load(added).active
    ]
    assert await owner.register_plan_keys(now_ms=clock.now_ms()) == []
    assert await h.store.probe_plan_keys() == ports.PlanKeyProbe()


async def test_a_plan_sealed_under_an_unregistered_key_is_refused_by_the_database(
    sealed_harness: stores.Harness, clock: ManualClock, tmp_path: Path
) -> None:
    h = sealed_harness
    other = tmp_path / "other-ring"
    plan_keyring.generate(other)
    h.approver_store.envelopes = plan_envelopes.from_keyring(other)  # type: ignore[misc]
    with pytest.raises(errors.QinglongError) as refused:
        await submit_runs(h.approver_store, clock, 1)
    assert refused.value.code in {"constraint_violation", "transition_refused"}
    assert await _rows(h) == []
