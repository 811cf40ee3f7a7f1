"""Recovery of `recovery_required` executions: snapshots, evidence, observations, resolutions."""

from __future__ import annotations

import dataclasses
import enum

from qinglong_dispatcher.domain import fencing, records, states
from qinglong_dispatcher.domain.states import ExecutionStatus


class Source(enum.StrEnum):
    """Who settled a recovery_required execution."""

    EVIDENCE = "evidence"
    """The action's evidence provider proved the effect committed."""
    MANUAL = "manual"
    """An authenticated operator decided."""


class EvidenceKind(enum.StrEnum):
    """What an evidence provider found (a raised error means `unavailable`)."""

    VERIFIED_SUCCEEDED = "verified_succeeded"
    MISSING = "missing"
    CONFLICT = "conflict"


class ObservationOutcome(enum.StrEnum):
    """Why a reconcile pass left an execution recovery_required."""

    MISSING = "missing"
    CONFLICT = "conflict"
    UNAVAILABLE = "unavailable"


MANUAL_ONLY = "manual_only"
"""Reason code of the `missing` observation for an action that has no evidence provider."""

AUDIT_MANUAL_RESOLUTION = "recovery.manual_resolution"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """A provider's answer; `evidence_digest` is set only when verified."""

    kind: EvidenceKind
    evidence_digest: str | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Observation:
    """The last reconcile outcome of one dispatch."""

    outcome: ObservationOutcome
    reason_code: str
    count: int
    last_seen_at_ms: int

    @classmethod
    def from_joined_row(cls, row: records.RowLike) -> Observation | None:
        """The `observation_*` columns of a row joined with its observation, if it has one."""
        if row["observation_outcome"] is None:
            return None
        return cls(
            outcome=ObservationOutcome(row["observation_outcome"]),
            reason_code=row["observation_reason"],
            count=row["observation_count"],
            last_seen_at_ms=row["observation_last_seen_at_ms"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """A recovery_required execution as the reconciler saw it, with its fence."""

    execution: records.Execution
    dispatch: records.Dispatch
    observation: Observation | None

    @property
    def fence(self) -> records.ExecutionIdentity:
        """The execution identity a resolution must still find."""
        return fencing.identity_of(self.execution)

    @property
    def since_ms(self) -> int:
        """When the lease expired, i.e. since when the row needs recovery."""
        assert self.execution.lease_expires_at_ms is not None
        return self.execution.lease_expires_at_ms


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Resolution:
    """A request to settle one recovery_required execution under its snapshot fence."""

    fence: records.ExecutionIdentity
    project_id: str
    resolution: states.Completion
    source: Source
    evidence_digest: str | None
    resolved_by: str
    reason_code: str
    comment: str | None = None
    """A person's comment on a manual settle, kept in its `recovery.manual_resolution` audit
    row (the command line's; the API's is in its request's row)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StoredResolution:
    """A committed resolution row."""

    dispatch_id: str
    source: Source
    resolution: states.Completion
    evidence_digest: str | None
    resolved_by: str
    principal: str
    reason_code: str
    committed_at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AuditEvent:
    """One immutable security audit record."""

    event_id: int
    kind: str
    actor: str
    principal: str
    project_id: str
    subject_id: str
    detail_code: str
    committed_at_ms: int
    token_id: str | None = None
    """For a write through the API: the token's id (never the token), its client's address
    and the request's id."""
    client_address: str | None = None
    request_id: str | None = None
    comment: str | None = None
    """The person's comment on the write (approve, reject, settle), one line."""


def settling_now_ms(caller_ms: int, database_ms: int) -> int:
    """The instant a settling decision uses: the earlier of the caller's and the database's.

    Deciding that a started lease has expired settles an execution that may still be running,
    so both clocks must agree: an operator (or a replica) whose clock runs ahead can never
    declare a live execution expired, and a database clock cannot be argued with.
    """
    return min(caller_ms, database_ms)


def resolve_refusal(
    row: records.Execution, fence: records.ExecutionIdentity, *, settling_ms: int
) -> str | None:
    """Why a resolution may not commit, or None: the row must still be the snapshot.

    `settling_ms` comes from `settling_now_ms`, never from the caller's clock alone.
    """
    if row.status is not ExecutionStatus.EXECUTING:
        return "not_recovery_required"
    if row.lease_expires_at_ms is None or row.lease_expires_at_ms > settling_ms:
        return "lease_live"
    if (
        row.attempt != fence.attempt
        or row.lease_owner != fence.owner
        or row.lease_token != fence.token
        or row.started_at_ms != fence.started_at_ms
        or row.version != fence.version
    ):
        return "fence_changed"
    return None
