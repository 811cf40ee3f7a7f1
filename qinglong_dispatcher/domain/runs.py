"""Runs created by `run.create` and the receipt that binds each to its dispatch.

See docs/actions.md, "`run.create`".
"""

from __future__ import annotations

import dataclasses
import enum

from qinglong_dispatcher.domain import digests, records

RECEIPT_SCHEMA_VERSION = 1
RESOURCE_TYPE_RUN = "run"
RESULT_CODE_RUN_CREATED = "run_created"
TRIGGER_TYPE = "approved_action"
EXECUTION_ORIGIN = "system"
EXECUTION_OWNER = "runtime"
RUN_CREATED_EVENT = "run.created"


class RunStatus(enum.StrEnum):
    """A Run's lifecycle; `run.create` only ever writes `queued`."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """A Run row."""

    run_id: str
    project_id: str
    task_id: str
    task_revision: int
    executor_type: str
    priority: int
    task_name: str | None
    task_snapshot_ref: str | None
    input_ref: str | None
    status: RunStatus
    trigger_type: str
    execution_origin: str
    execution_owner: str
    request_id: str | None
    idempotency_key: str
    accepted_at_ms: int
    version: int
    event_seq: int
    created_at_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> Run:
        """Build from a row keyed by column name."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["status"] = RunStatus(str(row["status"]))
        return cls(**values)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunReceipt:
    """The evidence row committed with the Run: binds approval, action, fence and resource."""

    dispatch_id: str
    schema_version: int
    approval_request_id: str
    project_id: str
    action_type: str
    action_digest: str
    execution_attempt: int
    execution_version: int
    started_at_ms: int
    idempotency_key: str
    outcome: str
    result_code: str
    resource_type: str
    resource_id: str
    created_at_ms: int
    evidence_digest: str

    @classmethod
    def from_row(cls, row: records.RowLike) -> RunReceipt:
        """Build from a row keyed by column name."""
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})

    def evidence_fields(self) -> dict[str, object]:
        """Every bound field except the digest itself, in canonical camelCase."""
        return {
            "schemaVersion": self.schema_version,
            "dispatchId": self.dispatch_id,
            "approvalRequestId": self.approval_request_id,
            "projectId": self.project_id,
            "actionType": self.action_type,
            "actionDigest": self.action_digest,
            "executionAttempt": self.execution_attempt,
            "executionVersion": self.execution_version,
            "startedAtMs": self.started_at_ms,
            "idempotencyKey": self.idempotency_key,
            "outcome": self.outcome,
            "resultCode": self.result_code,
            "resourceType": self.resource_type,
            "resourceId": self.resource_id,
            "createdAtMs": self.created_at_ms,
        }

    def computed_digest(self) -> str:
        """The digest these fields should carry."""
        return digests.evidence_digest(digests.RUN_RECEIPT_TAG, self.evidence_fields())

    def is_intact(self) -> bool:
        """Whether the stored digest matches the stored fields."""
        return self.schema_version == RECEIPT_SCHEMA_VERSION and (
            self.evidence_digest == self.computed_digest()
        )


def receipt_mismatch(
    receipt: RunReceipt,
    run: Run | None,
    *,
    approval_request_id: str,
    project_id: str,
    action_digest: str,
    attempt: int,
    started_at_ms: int,
) -> str | None:
    """Why a receipt and its Run do not prove this dispatch's run.create, or None when they do."""
    if not receipt.is_intact():
        return "receipt_digest_mismatch"
    expected = {
        "approval_request_id": approval_request_id,
        "project_id": project_id,
        "action_type": "run.create",
        "action_digest": action_digest,
        "execution_attempt": attempt,
        "started_at_ms": started_at_ms,
        "idempotency_key": receipt.dispatch_id,
        "outcome": "succeeded",
        "resource_type": RESOURCE_TYPE_RUN,
    }
    for name, value in expected.items():
        if getattr(receipt, name) != value:
            return f"receipt_{name}_mismatch"
    if run is None or run.run_id != receipt.resource_id:
        return "run_missing"
    run_expected = {
        "project_id": project_id,
        "request_id": approval_request_id,
        "idempotency_key": receipt.dispatch_id,
        "trigger_type": TRIGGER_TYPE,
        "execution_origin": EXECUTION_ORIGIN,
        "execution_owner": EXECUTION_OWNER,
        "accepted_at_ms": started_at_ms,
    }
    for name, value in run_expected.items():
        if getattr(run, name) != value:
            return f"run_{name}_mismatch"
    return None


def receipt_for(
    *,
    dispatch: records.Dispatch,
    attempt: int,
    execution_version: int,
    started_at_ms: int,
    run_id: str,
    created_at_ms: int,
) -> RunReceipt:
    """The receipt binding a new Run to its dispatch, with its evidence digest computed."""
    unsigned = RunReceipt(
        dispatch_id=dispatch.dispatch_id,
        schema_version=RECEIPT_SCHEMA_VERSION,
        approval_request_id=dispatch.approval_request_id,
        project_id=dispatch.project_id,
        action_type=dispatch.action_type,
        action_digest=dispatch.action_digest,
        execution_attempt=attempt,
        execution_version=execution_version,
        started_at_ms=started_at_ms,
        idempotency_key=dispatch.dispatch_id,
        outcome="succeeded",
        result_code=RESULT_CODE_RUN_CREATED,
        resource_type=RESOURCE_TYPE_RUN,
        resource_id=run_id,
        created_at_ms=created_at_ms,
        evidence_digest="",
    )
    return dataclasses.replace(unsigned, evidence_digest=unsigned.computed_digest())


_RECEIPT_COLUMNS = tuple(f.name for f in dataclasses.fields(RunReceipt))
_RUN_COLUMNS = tuple(f.name for f in dataclasses.fields(Run))


def receipt_row(receipt: RunReceipt) -> dict[str, object]:
    """Column values of a receipt (field names are the column names)."""
    # Every field is a plain value: no need for `asdict`'s recursive deep copy, which cost
    # more than the rest of the row's Python on the page path.
    return {name: getattr(receipt, name) for name in _RECEIPT_COLUMNS}


def run_row(run: Run) -> dict[str, object]:
    """Column values of a Run, status as text."""
    row = {name: getattr(run, name) for name in _RUN_COLUMNS}
    row["status"] = run.status.value
    return row
