"""The `run.create` evidence provider against every rule of ADR-0034 §4."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher.domain import recovery
from qinglong_dispatcher.recovery import run_create_evidence
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
    return await run_create_evidence.RunCreateEvidence(harness.store).evidence(snapshot)


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


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"approval_request_id": "a-forged"}, "receipt_approval_request_id_mismatch"),
        ({"action_digest": "0" * 64}, "receipt_action_digest_mismatch"),
        ({"execution_attempt": 7}, "receipt_execution_attempt_mismatch"),
        ({"started_at_ms": 1}, "receipt_started_at_ms_mismatch"),
        ({"project_id": "proj-other"}, "receipt_project_id_mismatch"),
        ({"action_type": "tool.invoke"}, "receipt_action_type_mismatch"),
        ({"outcome": "failed"}, "receipt_outcome_mismatch"),
        ({"idempotency_key": "k-other"}, "receipt_idempotency_key_mismatch"),
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
        ({"project_id": "proj-other"}, "run_project_id_mismatch"),
        ({"request_id": "a-other"}, "run_request_id_mismatch"),
        ({"execution_origin": "user"}, "run_execution_origin_mismatch"),
        ({"execution_owner": "user"}, "run_execution_owner_mismatch"),
        ({"trigger_type": "schedule"}, "run_trigger_type_mismatch"),
        ({"idempotency_key": "k-other"}, "run_idempotency_key_mismatch"),
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
