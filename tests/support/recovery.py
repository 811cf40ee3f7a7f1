"""Building recovery_required states through the store (and planted evidence rows)."""

from __future__ import annotations

import dataclasses
from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.actions.run_create import plan as run_create_plan
from qinglong_dispatcher.domain import fencing, ids, plans, records, recovery, runs, states
from tests.support import faults
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.stores import Harness


async def started_execution(
    h: Harness, clock: ManualClock, owner: str = "w1"
) -> tuple[records.Dispatch, records.ExecutionIdentity]:
    """Claim and start the next due execution without executing it."""
    batch = await h.store.claim_due(now_ms=clock.now_ms(), owner=owner, limit=1, lease_ms=LEASE_MS)
    (claim,) = batch.claimed
    assert claim.lease is not None
    assert claim.dispatch is not None
    (result,) = await h.store.start(
        [
            records.StartRequest(
                lease=claim.lease,
                approval_request_id=claim.dispatch.approval_request_id,
                action_digest=claim.dispatch.action_digest,
            )
        ],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert result.identity is not None
    return claim.dispatch, result.identity


async def request_for(
    harness: Harness,
    clock: ManualClock,
    dispatch: records.Dispatch,
    identity: records.ExecutionIdentity,
    run_id: str = "r-1",
) -> ports.RunCreateRequest:
    """The run.create effect request an execute of this started execution would send."""
    stored = await harness.store.get_plan(dispatch.project_id, dispatch.action_ref)
    assert stored is not None
    plan = plans.parse_plan("run.create", stored.plan_json.encode(), models=builtin.PLAN_MODELS)
    assert isinstance(plan, run_create_plan.RunCreatePlan)
    return ports.RunCreateRequest(
        dispatch=dispatch,
        identity=identity,
        run=run_create.build_run(
            plan,
            dispatch,
            run_id=run_id,
            started_at_ms=identity.started_at_ms,
            now_ms=clock.now_ms(),
        ),
        mutation_id=fencing.mutation_id(dispatch.dispatch_id, identity.attempt, "complete"),
        now_ms=clock.now_ms(),
    )


def manual_resolution(
    fence: records.ExecutionIdentity,
    project_id: str,
    resolution: states.Completion = states.Completion.FAILED,
) -> recovery.Resolution:
    """An operator's resolution of the started execution `fence`."""
    return recovery.Resolution(
        fence=fence,
        project_id=project_id,
        resolution=resolution,
        source=recovery.Source.MANUAL,
        evidence_digest=None,
        resolved_by="oncall-1",
        reason_code="operator_checked",
    )


def _sql_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


async def insert_row(h: Harness, table: str, row: dict[str, Any]) -> None:
    """Insert one row with raw SQL (values are test-controlled, quoted here)."""
    columns = ", ".join(row)
    values = ", ".join(_sql_value(v) for v in row.values())
    await h.raw(f"INSERT INTO {faults.table(h, table)} ({columns}) VALUES ({values})")


async def plant_run_and_receipt(
    h: Harness,
    clock: ManualClock,
    dispatch: records.Dispatch,
    identity: records.ExecutionIdentity,
    *,
    run_changes: dict[str, Any] | None = None,
    receipt_changes: dict[str, Any] | None = None,
    recompute_digest: bool = True,
) -> runs.RunReceipt:
    """Write a Run and its receipt as an effect that committed without its completion would."""
    stored = await h.store.get_plan(dispatch.project_id, dispatch.action_ref)
    assert stored is not None
    plan = plans.parse_plan("run.create", stored.plan_json.encode(), models=builtin.PLAN_MODELS)
    assert isinstance(plan, run_create_plan.RunCreatePlan)
    run = run_create.build_run(
        plan,
        dispatch,
        run_id="r-planted",
        started_at_ms=identity.started_at_ms,
        now_ms=clock.now_ms(),
    )
    run = dataclasses.replace(run, **(run_changes or {}))
    receipt = runs.receipt_for(
        dispatch=dispatch,
        attempt=identity.attempt,
        execution_version=identity.version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=clock.now_ms(),
    )
    receipt = dataclasses.replace(receipt, **(receipt_changes or {}))
    if recompute_digest and receipt_changes:
        receipt = dataclasses.replace(receipt, evidence_digest=receipt.computed_digest())
    run_row = runs.run_row(run)
    run_row["updated_at_ms"] = run.created_at_ms
    await insert_row(h, "runs", holders(h, run_row, identity.token))
    await insert_row(
        h, "approved_run_action_receipts", holders(h, runs.receipt_row(receipt), identity.token)
    )
    return receipt


def holders(h: Harness, row: dict[str, Any], token: str) -> dict[str, Any]:
    """`row` as the holder of the lease `token` writes it: on PostgreSQL with its lease proof
    (the database writes a receipt, or a Run keyed by a dispatch, only with it)."""
    if h.dialect != "postgres":
        return row
    return {**row, "lease_proof": ids.lease_proof(token)}
