"""Tool StepRuns: states, the tamper-evident binding, and the mutation ledger."""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from qinglong_dispatcher.domain import digests, errors, records

STEP_KIND_TOOL: Final = "tool"
BINDING_TAG: Final = "qinglong/step-run-binding@v1"
MUTATION_TAG: Final = "qinglong/step-run-mutation@v1"
STARTED_TAG: Final = "qinglong/started-step-run@v1"

EVENT_STARTED: Final = "step.started"
"""RunEvent type of `ready|waiting_approval → running`."""


class StepRunStatus(enum.StrEnum):
    """A Tool StepRun's lifecycle."""

    READY = "ready"
    """May start without an approval."""
    WAITING_APPROVAL = "waiting_approval"
    """May start only under its exact approval (the dispatched `tool.invoke` path)."""
    RUNNING = "running"
    """A start barrier committed for the current version: the adapter may have run."""
    SUCCEEDED = "succeeded"
    """Terminal: the adapter reported success, or evidence proved it."""
    FAILED = "failed"
    """Terminal: the adapter reported failure, it never started, or an operator decided."""
    LOST = "lost"
    """The outcome of the started attempt is unknown; only an operator may re-arm it."""


STARTABLE: Final = frozenset({StepRunStatus.READY, StepRunStatus.WAITING_APPROVAL})
"""States a start barrier accepts."""

RESULT_EVENT: Final = {
    StepRunStatus.SUCCEEDED: "step.succeeded",
    StepRunStatus.FAILED: "step.failed",
    StepRunStatus.LOST: "step.lost",
}
"""RunEvent type of each settling mutation."""

ALLOWED_TRANSITIONS: Final = frozenset(
    {
        (StepRunStatus.READY, StepRunStatus.RUNNING),
        (StepRunStatus.WAITING_APPROVAL, StepRunStatus.RUNNING),
        (StepRunStatus.RUNNING, StepRunStatus.SUCCEEDED),
        (StepRunStatus.RUNNING, StepRunStatus.FAILED),
        (StepRunStatus.RUNNING, StepRunStatus.LOST),
        # Settled without ever starting (the start was refused or never committed).
        (StepRunStatus.WAITING_APPROVAL, StepRunStatus.FAILED),
        (StepRunStatus.READY, StepRunStatus.FAILED),
    }
)
"""Every mutation the product writes. `lost → ready` is an operator's decision, never ours."""

TERMINAL: Final = frozenset({StepRunStatus.SUCCEEDED, StepRunStatus.FAILED})
"""States a StepRun never leaves (`lost` is not one: an operator may re-arm it)."""

OPERATOR_REARM: Final = (StepRunStatus.LOST, StepRunStatus.READY)
"""The one row change only an operator makes (a new attempt gets a new version)."""

ROW_UPDATES: Final = ALLOWED_TRANSITIONS | {OPERATOR_REARM}
"""Every (old, new) status pair an UPDATE of a StepRun row may have.

The product never updates a StepRun without changing its status, so there is no same-status
pair. The database triggers of migration 0006 allow exactly these pairs (on PostgreSQL the
re-arm only for a `qinglong_operator` login); a contract test proves it on both dialects.
"""


def _corrupted(step_run_id: str, what: str) -> errors.StoreCorrupted:
    return errors.StoreCorrupted(
        f"step run {step_run_id}: {what} fails its checks", code="step_run_corrupted"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Binding:
    """What a StepRun is bound to for its whole life (its digest is stored beside it)."""

    step_run_id: str
    run_id: str
    project_id: str
    tool_id: str
    tool_version: int
    definition_digest: str
    action_type: str
    action_ref: str
    action_digest: str
    approval_request_id: str | None

    def fields(self) -> dict[str, object]:
        """Canonical camelCase members."""
        return {
            "stepRunId": self.step_run_id,
            "runId": self.run_id,
            "projectId": self.project_id,
            "stepKind": STEP_KIND_TOOL,
            "toolId": self.tool_id,
            "toolVersion": self.tool_version,
            "definitionDigest": self.definition_digest,
            "actionType": self.action_type,
            "actionRef": self.action_ref,
            "actionDigest": self.action_digest,
            "approvalRequestId": self.approval_request_id,
        }

    @property
    def digest(self) -> str:
        """Digest in domain BINDING_TAG."""
        return digests.evidence_digest(BINDING_TAG, self.fields())


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewStepRun:
    """A StepRun to create: `ready`, or `waiting_approval` bound to an exact approval."""

    binding: Binding
    status: StepRunStatus

    def __post_init__(self) -> None:
        if self.status not in STARTABLE:
            raise errors.InvalidInput("a new step run is ready or waiting_approval")
        if self.status is StepRunStatus.WAITING_APPROVAL and not self.binding.approval_request_id:
            raise errors.InvalidInput("a waiting_approval step run needs its approval request")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StepRun:
    """A StepRun row whose binding digest was re-checked when it was read."""

    binding: Binding
    status: StepRunStatus
    version: int
    result_code: str | None
    binding_digest: str
    created_at_ms: int
    updated_at_ms: int

    @property
    def step_run_id(self) -> str:
        """The StepRun id."""
        return self.binding.step_run_id

    @classmethod
    def from_row(cls, row: records.RowLike) -> StepRun:
        """Build from a row; a binding that does not match its digest fails closed."""
        step_run_id = str(row["step_run_id"])
        try:
            status = StepRunStatus(str(row["status"]))
        except ValueError:
            raise _corrupted(step_run_id, "status") from None
        if row["step_kind"] != STEP_KIND_TOOL:
            raise _corrupted(step_run_id, "step kind")
        binding = Binding(
            step_run_id=step_run_id,
            run_id=row["run_id"],
            project_id=row["project_id"],
            tool_id=row["tool_id"],
            tool_version=row["tool_version"],
            definition_digest=row["definition_digest"],
            action_type=row["action_type"],
            action_ref=row["action_ref"],
            action_digest=row["action_digest"],
            approval_request_id=row["approval_request_id"],
        )
        if row["binding_digest"] != binding.digest:
            raise _corrupted(step_run_id, "binding digest")
        return cls(
            binding=binding,
            status=status,
            version=row["version"],
            result_code=row["result_code"],
            binding_digest=row["binding_digest"],
            created_at_ms=row["created_at_ms"],
            updated_at_ms=row["updated_at_ms"],
        )


def started_digest(
    binding_digest: str, *, step_run_id: str, run_id: str, project_id: str, started_version: int
) -> str:
    """Digest of the StepRun as the barrier started it (`running` at `started_version`)."""
    return digests.evidence_digest(
        STARTED_TAG,
        {
            "stepRunId": step_run_id,
            "runId": run_id,
            "projectId": project_id,
            "status": StepRunStatus.RUNNING.value,
            "version": started_version,
            "bindingDigest": binding_digest,
        },
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mutation:
    """One line of the StepRun mutation ledger; `committed_at_ms` is the database's clock."""

    mutation_id: str
    step_run_id: str
    run_id: str
    project_id: str
    from_status: StepRunStatus
    to_status: StepRunStatus
    from_version: int
    to_version: int
    run_event_seq: int
    run_version: int
    reason_code: str
    mutation_digest: str = ""
    committed_at_ms: int | None = None

    def fields(self) -> dict[str, object]:
        """Every bound member except the digest and the commit time."""
        return {
            "mutationId": self.mutation_id,
            "stepRunId": self.step_run_id,
            "runId": self.run_id,
            "projectId": self.project_id,
            "fromStatus": self.from_status.value,
            "toStatus": self.to_status.value,
            "fromVersion": self.from_version,
            "toVersion": self.to_version,
            "runEventSeq": self.run_event_seq,
            "runVersion": self.run_version,
            "reasonCode": self.reason_code,
        }

    def computed_digest(self) -> str:
        """The digest these fields should carry."""
        return digests.evidence_digest(MUTATION_TAG, self.fields())

    def signed(self) -> Mutation:
        """The same mutation with its digest filled in; refuses a transition we never write."""
        if (self.from_status, self.to_status) not in ALLOWED_TRANSITIONS:
            raise errors.InvalidInput(
                f"step run mutation {self.from_status.value} → {self.to_status.value} "
                "is not allowed"
            )
        return dataclasses.replace(self, mutation_digest=self.computed_digest())

    def row(self) -> dict[str, object]:
        """Column values (field names are the column names), statuses as text."""
        values = dataclasses.asdict(self)
        values["from_status"] = self.from_status.value
        values["to_status"] = self.to_status.value
        del values["committed_at_ms"]
        return values

    @classmethod
    def from_row(cls, row: records.RowLike) -> Mutation:
        """Build from a ledger row; a digest that does not match its fields fails closed."""
        try:
            mutation = cls(
                mutation_id=row["mutation_id"],
                step_run_id=row["step_run_id"],
                run_id=row["run_id"],
                project_id=row["project_id"],
                from_status=StepRunStatus(str(row["from_status"])),
                to_status=StepRunStatus(str(row["to_status"])),
                from_version=row["from_version"],
                to_version=row["to_version"],
                run_event_seq=row["run_event_seq"],
                run_version=row["run_version"],
                reason_code=row["reason_code"],
                mutation_digest=row["mutation_digest"],
                committed_at_ms=row["committed_at_ms"],
            )
        except ValueError:
            raise _corrupted(str(row["step_run_id"]), "ledger status") from None
        if mutation.mutation_digest != mutation.computed_digest():
            raise _corrupted(mutation.step_run_id, "ledger digest")
        return mutation


def settle_target(
    status: StepRunStatus, resolution: str, *, started_here: bool
) -> StepRunStatus | None:
    """Where a dispatch's StepRun goes when the dispatch settles, or None to leave it alone.

    The caller has checked the StepRun is bound to the dispatch's approval; `started_here`
    says its current version is the one this dispatch's barrier started (its ledger line).
    `resolution` is `succeeded`, `failed` or `blocked` (an unknown outcome → `lost`). A StepRun
    still waiting for its approval never started, so it fails whatever was decided.
    """
    if status is StepRunStatus.RUNNING and started_here:
        return {
            "succeeded": StepRunStatus.SUCCEEDED,
            "failed": StepRunStatus.FAILED,
            "blocked": StepRunStatus.LOST,
        }[resolution]
    if status is StepRunStatus.WAITING_APPROVAL:
        return StepRunStatus.FAILED
    return None
