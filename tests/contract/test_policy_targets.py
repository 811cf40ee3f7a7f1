"""The policy in force for a new request, by target prefix (docs/security.md#approval-policies),
on every dialect: the database chooses it from the request's plan's target. Among the newest
unretired versions for the action type and project, one whose prefix the target begins with
comes before one without; the longer prefix first; a project's before an any-project one; then
the first name in byte order. A prefix is literal and case-sensitive, and a request without a
target matches only policies without a prefix."""

from __future__ import annotations

import json

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approval_policies, plans
from qinglong_dispatcher.usecases import requesting
from tests.support import faults, outbox
from tests.support.clock import ManualClock
from tests.support.stores import Harness
from tests.support.targets import MODELS, TARGET_TYPE


@pytest.fixture(autouse=True)
async def _someone_listens(harness: Harness) -> None:
    """The outbox keeps `approval.requested` only while a subscription exists."""
    await outbox.someone_listens(harness)


async def _chosen(
    h: Harness, clock: ManualClock, ref: str, target: str | None, *, project: str = "p1"
) -> tuple[str, str | None] | None:
    """(name, target prefix) of the policy copied into a new request for `target`."""
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": ref, "projectId": project, "router": target},
        models=MODELS,
    )
    settings = api.Policy(approval_ttl_ms=600_000, max_attempts=5)
    created = await requesting.request_approval(
        h.approver_store, clock, settings, plan, requested_by="tester"
    )
    state = await h.store.vote_state(created.approval_request_id)
    assert state is not None
    # The outbox's `approval.requested` names the same policy as the request's copy.
    told = await h.scalar(
        f"SELECT payload_json AS p FROM {faults.table(h, 'notification_events')} "
        f"WHERE kind = 'approval.requested' AND subject_id = '{created.approval_request_id}'"
    )
    named = json.loads(told).get("policy") if isinstance(told, str) else told.get("policy")
    assert named == (None if state.policy is None else state.policy.name), (named, state)
    return None if state.policy is None else (state.policy.name, state.policy.target_prefix)


async def test_the_most_specific_policy_wins_in_the_documented_order(
    harness: Harness, clock: ManualClock
) -> None:
    owner = await harness.owner()

    async def policy(name: str, prefix: str | None, project: str | None = None) -> None:
        await owner.set_policy(
            approval_policies.NewPolicy(
                name=name, action_type=TARGET_TYPE, project_id=project, target_prefix=prefix
            )
        )

    await policy("default", None)
    await policy("for-p1", None, "p1")
    assert await _chosen(harness, clock, "a1", "prod-db") == ("for-p1", None)
    # A matching prefix beats no prefix, even a project's policy without one.
    await policy("prod", "prod-")
    assert await _chosen(harness, clock, "a2", "prod-db") == ("prod", "prod-")
    assert await _chosen(harness, clock, "a3", "staging-db") == ("for-p1", None)
    assert await _chosen(harness, clock, "a4", None) == ("for-p1", None)
    assert await _chosen(harness, clock, "a5", "x", project="p2") == ("default", None)
    # The longer prefix beats the shorter, whatever the names and projects.
    await policy("a-prod-db", "prod-db")
    assert await _chosen(harness, clock, "a6", "prod-db-1") == ("a-prod-db", "prod-db")
    assert await _chosen(harness, clock, "a7", "prod-web") == ("prod", "prod-")
    # At one prefix length, a project's policy beats an any-project one.
    await policy("zz-p1-prod", "prod-", "p1")
    assert await _chosen(harness, clock, "a8", "prod-web") == ("zz-p1-prod", "prod-")
    assert await _chosen(harness, clock, "a9", "prod-web", project="p2") == ("prod", "prod-")
    # Then the first name, in byte order: '-' before letters (a linguistic collation would
    # ignore the '-' and put "p1a" first).
    await policy("p1a", "prod-", "p1")
    assert await _chosen(harness, clock, "b1", "prod-web") == ("p1a", "prod-")
    await policy("p1-z", "prod-", "p1")
    assert await _chosen(harness, clock, "b2", "prod-web") == ("p1-z", "prod-")
    # A prefix is literal and case-sensitive; a retired policy matches nothing.
    await policy("literal", "prod_")
    assert await _chosen(harness, clock, "b3", "prodx") == ("for-p1", None)
    assert await _chosen(harness, clock, "b4", "prod_1") == ("literal", "prod_")
    assert await _chosen(harness, clock, "b5", "PROD-web") == ("for-p1", None)
    for name in ("p1a", "zz-p1-prod", "p1-z"):
        await owner.retire_policy(name)
    assert await _chosen(harness, clock, "b6", "prod-web") == ("prod", "prod-")


async def test_a_prefix_shows_in_the_policies_read_back(
    harness: Harness, clock: ManualClock
) -> None:
    owner = await harness.owner()
    written = await owner.set_policy(
        approval_policies.NewPolicy(name="prod", action_type=TARGET_TYPE, target_prefix="prod-")
    )
    assert written.target_prefix == "prod-"
    assert [p.target_prefix for p in await harness.store.policies_in_force()] == ["prod-"]
    assert [p.target_prefix for p in await owner.policy_versions("prod")] == ["prod-"]
    retired = await owner.retire_policy("prod")
    assert (retired.target_prefix, retired.retired) == ("prod-", True)


async def test_a_prefix_policys_lifetime_is_the_requests_by_its_target(
    harness: Harness, clock: ManualClock
) -> None:
    owner = await harness.owner()
    await owner.set_policy(
        approval_policies.NewPolicy(
            name="prod", action_type=TARGET_TYPE, target_prefix="prod-", lifetime_ms=60_000
        )
    )
    await owner.set_policy(approval_policies.NewPolicy(name="default", action_type=TARGET_TYPE))
    assert await _chosen(harness, clock, "l1", "prod-db") == ("prod", "prod-")
    assert await _chosen(harness, clock, "l2", "staging-db") == ("default", None)
    table = "approval_requests" if harness.dialect == "sqlite" else "qinglong.approval_requests"
    rows = await harness.raw(
        f"SELECT action_ref, expires_at_ms - created_at_ms AS life FROM {table} ORDER BY 1"
    )
    assert [(r["action_ref"], r["life"]) for r in rows] == [("l1", 60_000), ("l2", 600_000)]
