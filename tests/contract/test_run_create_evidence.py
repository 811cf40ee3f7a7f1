"""The `run.create` evidence provider against every rule of docs/decisions/0002."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher.actions.run_create import evidence as run_create_evidence
from qinglong_dispatcher.domain import recovery
from tests.support import repositories
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.recovery import insert_row, plant_run_and_receipt, started_execution
from tests.support.stores import Harness

Kind = recovery.EvidenceKind


async def snapshot_after_expiry(harness: Harness, clock: ManualClock) -> recovery.Snapshot:
    clock.advance(ms=LEASE_MS)
    (snapshot,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=64)
    return snapshot


async def evidence(harness: Harness, snapshot: recovery.Snapshot) -> recovery.Evidence:
    return await run_create_evidence.RunCreateEvidence(repositories.runs(harness.store)).evidence(
        snapshot
    )


async def test_a_matching_receipt_and_run_are_verified(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    receipt = await plant_run_and_receipt(harness, clock, *pair)
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.evidence_digest) == (Kind.VERIFIED_SUCCEEDED, receipt.evidence_digest)


async def test_no_receipt_and_no_run_is_missing(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock)
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.MISSING, "receipt_missing")


async def test_a_key_collision_without_receipt_is_a_conflict(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock)
    await insert_row(
        harness,
        "runs",
        {
            "run_id": "r-squatter",
            "project_id": "proj-1",
            "task_id": "x",
            "task_revision": 1,
            "executor_type": "shell",
            "priority": 0,
            "status": "queued",
            "trigger_type": "manual",
            "execution_origin": "user",
            "execution_owner": "user",
            "request_id": None,
            "idempotency_key": consumed.dispatch_id,
            "accepted_at_ms": 1,
            "version": 1,
            "event_seq": 1,
            "created_at_ms": 1,
            "updated_at_ms": 1,
        },
    )
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.CONFLICT, "idempotency_key_collision")


async def test_a_receipt_below_the_snapshot_version_is_fine_after_a_renew(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    receipt = await plant_run_and_receipt(harness, clock, dispatch, identity)
    renewal = await harness.store.renew(
        identity.as_lease(), now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert renewal.lease is not None
    snapshot = await snapshot_after_expiry(harness, clock)
    assert snapshot.fence.version > receipt.execution_version
    found = await evidence(harness, snapshot)
    assert found.kind is Kind.VERIFIED_SUCCEEDED


async def test_a_receipt_above_the_snapshot_version_is_a_conflict(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    await plant_run_and_receipt(
        harness,
        clock,
        dispatch,
        identity,
        receipt_changes={"execution_version": identity.version + 5},
    )
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.CONFLICT, "receipt_version_ahead")


RECEIPT_GUARD = "binds its started execution"
"""The receipt guard's refusal (migration 0011), in both dialects' messages."""


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"outcome": "failed"}, "receipt_outcome_mismatch"),
        ({"resource_type": "package"}, "receipt_resource_type_mismatch"),
    ],
)
async def test_a_receipt_bound_to_anything_else_is_a_conflict(
    harness: Harness, clock: ManualClock, changes: dict[str, Any], reason: str
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    await plant_run_and_receipt(harness, clock, *pair, receipt_changes=changes)
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.CONFLICT, reason)


@pytest.mark.parametrize(
    "changes",
    [
        {"approval_request_id": "a-forged"},
        {"action_digest": "0" * 64},
        {"execution_attempt": 7},
        {"started_at_ms": 1},
        {"project_id": "proj-other"},
        {"action_type": "tool.invoke"},
        {"idempotency_key": "k-other"},
    ],
)
async def test_a_receipt_bound_to_another_execution_is_refused_by_the_database(
    harness: Harness, clock: ManualClock, changes: dict[str, Any]
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    with pytest.raises(Exception, match=RECEIPT_GUARD):
        await plant_run_and_receipt(harness, clock, *pair, receipt_changes=changes)
    assert await repositories.runs(harness.store).get_receipt(pair[0].dispatch_id) is None
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert found.kind is not Kind.VERIFIED_SUCCEEDED


async def test_a_tampered_receipt_digest_is_a_conflict(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    await plant_run_and_receipt(
        harness, clock, *pair, receipt_changes={"result_code": "edited"}, recompute_digest=False
    )
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.CONFLICT, "receipt_digest_mismatch")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"execution_origin": "user"}, "run_execution_origin_mismatch"),
        ({"execution_owner": "user"}, "run_execution_owner_mismatch"),
        ({"trigger_type": "schedule"}, "run_trigger_type_mismatch"),
        ({"accepted_at_ms": 5}, "run_accepted_at_ms_mismatch"),
    ],
)
async def test_a_run_that_differs_from_its_receipt_is_a_conflict(
    harness: Harness, clock: ManualClock, changes: dict[str, Any], reason: str
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    await plant_run_and_receipt(harness, clock, *pair, run_changes=changes)
    found = await evidence(harness, await snapshot_after_expiry(harness, clock))
    assert (found.kind, found.reason) == (Kind.CONFLICT, reason)


@pytest.mark.parametrize(
    "changes",
    [{"project_id": "proj-other"}, {"request_id": "a-other"}, {"idempotency_key": "k-other"}],
)
async def test_a_receipt_for_a_run_of_another_dispatch_is_refused_by_the_database(
    harness: Harness, clock: ManualClock, changes: dict[str, Any]
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    pair = await started_execution(harness, clock)
    with pytest.raises(Exception, match=RECEIPT_GUARD):
        await plant_run_and_receipt(harness, clock, *pair, run_changes=changes)
    assert await repositories.runs(harness.store).get_receipt(pair[0].dispatch_id) is None
