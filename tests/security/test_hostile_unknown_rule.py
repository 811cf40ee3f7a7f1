"""A policy's rule on an unknown outcome (hold or proceed), attacked from plain logins holding
only their documented roles (PostgreSQL: the runtime login of docs/security.md; SQLite: a plain
connection to the file): no login flips the rule its execution carries, nor names another in
a consume written by hand (the approver login on PostgreSQL); under hold a second
dispatch is never leased on a target whose last effect is `recovery_required`; under proceed
it is leased once the first is `recovery_required`, through the real claim, and never while
the first's lease lives (nothing changed)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.domain import approval_policies, errors, plans, records
from qinglong_dispatcher.usecases import approving, requesting
from tests.support import faults, refusals, stores
from tests.support.clock import ManualClock
from tests.support.targets import MODELS, TARGET_TYPE, claim_and_start
from tests.support.windows import SETTINGS, another_approver, execution, submit_windowed

LONG_LEASE_MS = 3_600_000
UNIQUE_TARGET = {
    "postgres": "23505",
    "sqlite": "UNIQUE constraint failed: approved_action_dispatch_executions.target",
}
PROCEEDING = {
    "postgres": "QLH01",
    "sqlite": "qinglong:target_refused: another execution holds the target",
}


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these leases as the test means them."""
    return ManualClock(int(time.time() * 1000))


async def _rule(h: stores.Harness, *, proceed: bool) -> None:
    owner = await h.owner()
    await owner.set_policy(
        approval_policies.NewPolicy(
            name="on-unknown", action_type=TARGET_TYPE, proceed_on_unknown=proceed
        )
    )


def _executions(h: stores.Harness) -> str:
    return faults.table(h, "approved_action_dispatch_executions")


async def _snapshot(h: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    row = await h.raw(f"SELECT * FROM {_executions(h)} WHERE dispatch_id = '{dispatch_id}'")
    events = await h.scalar(
        f"SELECT count(*) FROM {faults.table(h, 'execution_events')} "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )
    return row[0], events


def _lease_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    """The runtime's own lease of a waiting row, written by hand (what `lease_page` writes)."""
    expires = now_ms + LONG_LEASE_MS
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_executions(h)} SET status = 'leased', version = version + 1, "
        "attempt = attempt + 1, lease_owner = 'mallory', lease_token = 'mallory', "
        f"lease_expires_at_ms = {expires}, eligible_at_ms = {expires}, "
        f"updated_at_ms = {now_ms}{proof} WHERE dispatch_id = '{dispatch_id}'"
    )


async def _refused_as_runtime(h: stores.Harness, sql: str) -> str:
    if h.dialect == "postgres":
        database = str(await h.scalar("SELECT current_database()"))
        return await refusals.sqlstate_as(stores.runtime_url(database), sql)
    return await refusals.sqlite_abort(h, sql)


async def _started(
    h: stores.Harness, clock: ManualClock, *, lease_ms: int
) -> records.ExecutionIdentity:
    """A change of router-1 claimed and started under a lease of `lease_ms`."""
    first = await submit_windowed(h, clock, "act-1", "router-1")
    dispatch, identity = await claim_and_start(h.store, clock, lease_ms=lease_ms)
    assert dispatch.dispatch_id == first
    return identity


@pytest.mark.parametrize("proceed", [False, True])
async def test_no_login_flips_the_rule_of_its_execution(
    harness: stores.Harness, now: ManualClock, proceed: bool
) -> None:
    await _rule(harness, proceed=proceed)
    dispatch_id = await submit_windowed(harness, now, "act-1", "router-1")
    before = await _snapshot(harness, dispatch_id)
    value = {"postgres": {True: "false", False: "true"}, "sqlite": {True: "0", False: "1"}}
    # Riding on the runtime's own lease, a change the state machine admits, so that only the
    # rule's guard can refuse it (whatever order a dialect fires its triggers in).
    flip = _lease_sql(harness, now.ms, dispatch_id).replace(
        " WHERE dispatch_id",
        f", proceed_on_unknown = {value[harness.dialect][proceed]} WHERE dispatch_id",
    )

    refusal = await _refused_as_runtime(harness, flip)

    expected = {"postgres": "QLI01", "sqlite": "qinglong:target_refused: a rule never changes"}
    assert refusal == expected[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before
    assert bool(before[0]["proceed_on_unknown"]) is proceed


async def test_under_hold_a_recovery_required_target_is_never_leased_again(
    harness: stores.Harness, now: ManualClock
) -> None:
    await _rule(harness, proceed=False)
    await _started(harness, now, lease_ms=200)
    await anyio.sleep(0.3)
    now.ms = int(time.time() * 1000)
    second = await submit_windowed(harness, now, "act-2", "router-1")
    before = await _snapshot(harness, second)

    batch = await harness.store.claim_due(now_ms=now.ms, owner="w2", limit=8, lease_ms=30_000)
    assert not batch.claimed
    refusal = await _refused_as_runtime(harness, _lease_sql(harness, now.ms, second))

    assert refusal == UNIQUE_TARGET[harness.dialect]
    assert await _snapshot(harness, second) == before


async def test_under_proceed_a_live_lease_still_holds_the_target(
    harness: stores.Harness, now: ManualClock
) -> None:
    await _rule(harness, proceed=True)
    await _started(harness, now, lease_ms=LONG_LEASE_MS)
    second = await submit_windowed(harness, now, "act-2", "router-1")
    before = await _snapshot(harness, second)

    batch = await harness.store.claim_due(now_ms=now.ms, owner="w2", limit=8, lease_ms=30_000)
    assert not batch.claimed
    refusal = await _refused_as_runtime(harness, _lease_sql(harness, now.ms, second))

    assert refusal == PROCEEDING[harness.dialect]
    assert await _snapshot(harness, second) == before


async def test_under_proceed_a_recovery_required_target_is_leased_again(
    harness: stores.Harness, now: ManualClock
) -> None:
    await _rule(harness, proceed=True)
    started_ms = now.ms
    identity = await _started(harness, now, lease_ms=200)
    first = identity.dispatch_id
    await anyio.sleep(0.3)
    now.ms = int(time.time() * 1000)
    second = await submit_windowed(harness, now, "act-2", "router-1")

    batch = await harness.store.claim_due(now_ms=now.ms, owner="w2", limit=8, lease_ms=30_000)

    assert [c.dispatch_id for c in batch.claimed] == [second]
    rows = await harness.raw(
        f"SELECT dispatch_id, status FROM {_executions(harness)} ORDER BY dispatch_id"
    )
    assert {r["dispatch_id"]: r["status"] for r in rows} == {
        first: "executing",
        second: "leased",
    }
    # Its holder, whose clock lags, renews: the target is another's now, and it never comes
    # back to life beside it.
    before = await _snapshot(harness, first)
    with pytest.raises(errors.StoreError):
        await harness.store.renew(identity.as_lease(), now_ms=started_ms, lease_ms=LONG_LEASE_MS)
    assert await _snapshot(harness, first) == before


async def _approved(h: stores.Harness, clock: ManualClock) -> str:
    """A change of router-1 requested under the policy in force and approved by another
    principal, not consumed; its request id."""
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1", "router": "router-1"},
        models=MODELS,
    )
    created = await requesting.request_approval(
        h.approver_store, clock, SETTINGS, plan, requested_by="tester"
    )
    other = await another_approver(h)
    try:
        await approving.approve(other, clock, created.approval_request_id, decided_by="approver")
    finally:
        await other.close()
    return created.approval_request_id


def _forged_consume(
    h: stores.Harness, approval_request_id: str, now_ms: int, *, proceed: bool
) -> list[str]:
    """The approver's consume written by hand: the request consumed, its dispatch, and its
    execution naming the rule `proceed` (SQLite: the dispatch's target and window too, which
    its own triggers compare)."""
    requests = faults.table(h, "approval_requests")
    dispatches = faults.table(h, "approved_action_dispatches")
    where = f"WHERE approval_request_id = '{approval_request_id}'"
    if h.dialect == "postgres":
        return [
            f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
            f"consumed_principal = session_user, updated_at_ms = {now_ms} {where}",
            f"INSERT INTO {dispatches} (dispatch_id, approval_request_id, project_id, "
            "action_type, action_ref, action_digest, approved_by, created_at_ms) "
            "SELECT 'd-forged', approval_request_id, project_id, action_type, action_ref, "
            f"action_digest, decided_by, {now_ms} FROM {requests} {where}",
            f"INSERT INTO {_executions(h)} (dispatch_id, project_id, status, version, attempt, "
            "max_attempts, eligible_at_ms, created_at_ms, updated_at_ms, proceed_on_unknown) "
            f"VALUES ('d-forged', 'p1', 'pending', 0, 0, 5, {now_ms}, {now_ms}, {now_ms}, "
            f"{'true' if proceed else 'false'})",
        ]
    return [
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
        f"consumed_principal = 'mallory', updated_at_ms = {now_ms} {where}",
        f"INSERT INTO {dispatches} (dispatch_id, approval_request_id, project_id, action_type, "
        "action_ref, action_digest, approved_by, created_at_ms, target, traceparent, "
        "not_before_ms, not_after_ms) "
        "SELECT 'd-forged', a.approval_request_id, a.project_id, a.action_type, a.action_ref, "
        f"a.action_digest, a.decided_by, {now_ms}, p.target, a.traceparent, w.not_before_ms, "
        "w.not_after_ms FROM approval_requests AS a "
        "JOIN action_plans AS p ON p.project_id = a.project_id AND p.action_ref = a.action_ref "
        "JOIN approval_request_windows AS w ON w.approval_request_id = a.approval_request_id "
        f"WHERE a.approval_request_id = '{approval_request_id}'",
        f"INSERT INTO {_executions(h)} (dispatch_id, project_id, status, version, attempt, "
        "max_attempts, eligible_at_ms, created_at_ms, updated_at_ms, target, not_before_ms, "
        f"not_after_ms, proceed_on_unknown) SELECT 'd-forged', project_id, 'pending', 0, 0, 5, "
        f"{now_ms}, {now_ms}, {now_ms}, target, not_before_ms, not_after_ms, {int(proceed)} "
        "FROM approved_action_dispatches WHERE dispatch_id = 'd-forged'",
    ]


@pytest.mark.parametrize("proceed", [False, True])
async def test_a_hand_written_consume_cannot_name_another_rule(
    harness: stores.Harness, now: ManualClock, proceed: bool
) -> None:
    """PostgreSQL: the recorder's definer overwrites the forged rule with the policy's.
    SQLite: the trigger refuses the execution, and nothing is written; the same execution
    naming the policy's rule is admitted."""
    await _rule(harness, proceed=proceed)
    request = await _approved(harness, now)
    update, dispatch, forged = _forged_consume(harness, request, now.ms, proceed=not proceed)
    if harness.dialect == "postgres":
        database = str(await harness.scalar("SELECT current_database()"))
        connection = await asyncpg.connect(stores.approver_url(database), timeout=5)
        try:
            async with connection.transaction():
                for sql in (update, dispatch, forged):
                    await connection.execute(sql)
        finally:
            await connection.close()
        assert (await execution(harness, "d-forged"))["proceed_on_unknown"] is proceed
        return
    await harness.raw(update)
    await harness.raw(dispatch)
    refusal = await refusals.sqlite_abort(harness, forged)
    assert refusal == "qinglong:target_refused: an execution carries its policy's rule"
    assert (
        await harness.raw(f"SELECT * FROM {_executions(harness)} WHERE dispatch_id = 'd-forged'")
        == []
    )
    # The rule alone was refused: the same execution naming the policy's is written.
    *_, honest = _forged_consume(harness, request, now.ms, proceed=proceed)
    await harness.raw(honest)
    assert (await execution(harness, "d-forged"))["proceed_on_unknown"] == int(proceed)
