"""Plan digests keyed with the ring, on every dialect: what the database holds confirms no
guessed plan without the ring, and digests written before the ring still bind their plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import digests, plan_previews, plans
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from tests.support import repositories, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness


async def _use(harness: Harness, envelopes: plan_envelopes.Envelopes) -> None:
    """Every store of the harness seals, opens and digests with `envelopes`."""
    for store in {id(s): s for s in (harness.store, harness.approver_store)}.values():
        store.envelopes = envelopes  # type: ignore[misc]
    # Its keys registered, as `migrate` with the ring does (the owner's to do).
    await harness.register_plan_keys(*envelopes.key_ids)


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    path = tmp_path / "plan-keys"
    plan_keyring.generate(path)
    return path


def _table(h: Harness, name: str) -> str:
    return name if h.dialect == "sqlite" else f"qinglong.{name}"


async def _stored_digests(h: Harness, approval_request_id: str) -> tuple[str, str, str]:
    (row,) = await h.raw(
        "SELECT p.plan_digest, a.action_digest, d.action_digest AS dispatched"
        f" FROM {_table(h, 'approval_requests')} a"
        f" JOIN {_table(h, 'action_plans')} p"
        " ON (p.project_id, p.action_ref) = (a.project_id, a.action_ref)"
        f" JOIN {_table(h, 'approved_action_dispatches')} d"
        " ON d.approval_request_id = a.approval_request_id"
        f" WHERE a.approval_request_id = '{approval_request_id}'"
    )
    return row["plan_digest"], row["action_digest"], row["dispatched"]


async def test_with_a_ring_the_stored_digests_cannot_be_recomputed_from_the_plan(
    harness: Harness, clock: ManualClock, ring: Path
) -> None:
    h = harness
    envelopes = plan_envelopes.from_keyring(ring)
    await _use(h, envelopes)
    (consumed,) = await submit_runs(h.approver_store, clock, 1, project="guessable")
    stored = await h.store.get_plan("guessable", consumed.action_ref)
    assert stored is not None
    plan = plans.parse_plan("run.create", stored.plan_bytes(), models=builtin.PLAN_MODELS)
    plan_digest, action_digest, dispatched = await _stored_digests(h, consumed.approval_request_id)
    # Whoever guesses the plan exactly still cannot confirm it against the database.
    assert action_digest != plans.plan_action_digest(plan, digests.PLAIN)
    assert plan_digest != digests.PLAIN.plan_digest(plan.to_canonical_dict())
    keyed = envelopes.digests
    assert action_digest == dispatched == plans.plan_action_digest(plan, keyed)
    assert plan_digest == keyed.plan_digest(plan.to_canonical_dict())
    # Rotation leaves the digest secret alone: the approved digest still binds the plan.
    plan_keyring.add_key(ring)
    await _use(h, plan_envelopes.from_keyring(ring))
    owner = await h.owner()  # resealing is the owner's (`keys rotate` as the administrator)
    owner.envelopes = plan_envelopes.from_keyring(ring)  # type: ignore[misc]
    assert (await owner.reseal_plans(limit=10)).resealed == 1
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"succeeded": 1}
    assert (await h.store.check_plans(limit=10)).failed == {}


async def test_a_dispatch_approved_before_the_ring_runs_as_approved_after_it(
    harness: Harness, clock: ManualClock, ring: Path
) -> None:
    h = harness
    (before,) = await submit_runs(h.approver_store, clock, 1, project="before")
    _, plain, _ = await _stored_digests(h, before.approval_request_id)
    await _use(h, plan_envelopes.from_keyring(ring))
    (after,) = await submit_runs(h.approver_store, clock, 1, project="after")
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes == {"succeeded": 2}
    assert (await _stored_digests(h, before.approval_request_id))[1] == plain
    for project, consumed in (("before", before), ("after", after)):
        assert (
            await repositories.runs(h.store).get_run_by_key(project, consumed.dispatch_id)
            is not None
        )


async def test_a_file_write_approved_before_the_ring_and_one_after_both_run(
    harness: Harness, clock: ManualClock, ring: Path, tmp_path: Path
) -> None:
    h = harness
    sandbox_dir = tmp_path / "tool-sandbox"
    sandbox_dir.mkdir()
    run = await tools.live_run(h, clock)
    before = await tools.submit_tool(h, clock, run, content="approved before the ring\n")
    await _use(h, plan_envelopes.from_keyring(ring))
    after = await tools.submit_tool(h, clock, run, content="approved with the ring\n")
    handlers = tools.tool_handlers(h.store, clock, sandbox_dir)
    report = await make_dispatcher(h.store, clock, handlers=handlers).dispatch_batch()
    assert report.outcomes == {"succeeded": 2}
    for submitted in (before, after):
        written = sandbox_dir / run.project_id / submitted.consumed.dispatch_id
        assert written.read_text().startswith("approved ")


async def test_a_drifted_plan_is_still_drift_under_a_ring(
    harness: Harness, clock: ManualClock, ring: Path
) -> None:
    """A keyed digest that does not match is never rescued by the plain fallback."""
    keyed = plan_envelopes.from_keyring(ring).digests
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    other = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 2})
    approved = plans.plan_action_digest(plan, keyed)
    _, digest = plans.resolve_plan(
        "run.create",
        plans.plan_canonical(other),
        approved_digest=approved,
        plan_digests=keyed,
        models=builtin.PLAN_MODELS,
    )
    assert digest != approved
    plain_of_other = plans.plan_action_digest(other, digests.PLAIN)
    _, digest = plans.resolve_plan(
        "run.create",
        plans.plan_canonical(plan),
        approved_digest=plain_of_other,
        plan_digests=keyed,
        models=builtin.PLAN_MODELS,
    )
    assert digest != plain_of_other


async def test_a_previews_field_digest_is_keyed_with_the_ring(
    harness: Harness, clock: ManualClock, ring: Path
) -> None:
    h = harness
    keyed = plan_envelopes.from_keyring(ring)
    await _use(h, keyed)
    (consumed,) = await submit_runs(h.approver_store, clock, 1, project="shown")
    await make_dispatcher(h.store, clock).dispatch_batch()
    detail = await h.store.show_dispatch(
        consumed.dispatch_id, now_ms=clock.now_ms(), shown=plan_previews.IDENTITY_ONLY
    )
    assert detail is not None
    assert detail.plan is not None
    shown = detail.plan["taskId"]
    assert shown == plan_previews.redacted("task-0", keyed.digests)
    assert shown != plan_previews.redacted("task-0", digests.PLAIN)
