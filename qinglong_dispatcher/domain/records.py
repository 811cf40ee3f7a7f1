"""Immutable values the store hands out and takes back: dispatches, executions, fences, results."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any, Protocol

from qinglong_dispatcher.domain import states


class RowLike(Protocol):
    """A database row addressable by column name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str, /) -> Any: ...


class Outcome(enum.StrEnum):
    """Expected results of store operations: never booleans, never exceptions."""

    CLAIMED = "claimed"
    REPLAYED = "replayed"
    LIVE_LEASE = "live_lease"
    NOT_DUE = "not_due"
    NOT_FOUND = "not_found"
    NOT_CLAIMABLE = "not_claimable"
    EXHAUSTED = "exhausted"
    RENEWED = "renewed"
    EXPIRED = "expired"
    STARTED = "started"
    RELEASED = "released"
    COMPLETED = "completed"
    EXISTING = "existing"
    CONFLICT = "conflict"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Dispatch:
    """The immutable record of one consumed approval."""

    dispatch_id: str
    approval_request_id: str
    project_id: str
    action_type: str
    action_ref: str
    action_digest: str
    approved_by: str
    created_at_ms: int
    target: str | None = None
    """What its plan changes (`plans.plan_target`), copied by the database from the plan: at
    most one dispatch per target is past its claim."""
    traceparent: str | None = None
    """The W3C trace context its request was submitted under, copied by the database from
    the request (`domain.traces`); None: no trace was named."""

    @classmethod
    def from_joined_row(cls, row: RowLike) -> Dispatch:
        """The dispatch columns of an execution row joined with its dispatch."""
        return cls(
            dispatch_id=row["dispatch_id"],
            approval_request_id=row["approval_request_id"],
            project_id=row["project_id"],
            action_type=row["action_type"],
            action_ref=row["action_ref"],
            action_digest=row["action_digest"],
            approved_by=row["approved_by"],
            created_at_ms=row["dispatch_created_at_ms"],
            target=row["target"],
            traceparent=row["traceparent"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    """The mutable control row of a dispatch, as read in one transaction."""

    dispatch_id: str
    project_id: str
    status: states.ExecutionStatus
    version: int
    attempt: int
    max_attempts: int
    eligible_at_ms: int | None
    retry_at_ms: int | None
    lease_owner: str | None
    lease_token: str | None
    lease_expires_at_ms: int | None
    started_at_ms: int | None
    result_mutation_id: str | None
    result_code: str | None
    completed_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    takeovers: int
    """Claims that replaced an expired lease before the barrier (each refunded its attempt)."""

    @classmethod
    def from_row(cls, row: RowLike) -> Execution:
        """Build from a row keyed by column name."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["status"] = states.ExecutionStatus(str(row["status"]))
        return cls(**values)

    def effective_status(self, now_ms: int) -> states.EffectiveStatus:
        """The status an operator sees at `now_ms`."""
        return states.effective_status(self.status, self.lease_expires_at_ms, now_ms)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """The fence a claim hands out; renew and start must present it exactly."""

    dispatch_id: str
    attempt: int
    owner: str
    token: str
    version: int
    expires_at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionIdentity:
    """The fence of a started execution: `version` may only have grown by a renew."""

    dispatch_id: str
    attempt: int
    owner: str
    token: str
    started_at_ms: int
    version: int
    lease_expires_at_ms: int

    def as_lease(self) -> Lease:
        """The lease view, for renewing a running execute."""
        return Lease(
            dispatch_id=self.dispatch_id,
            attempt=self.attempt,
            owner=self.owner,
            token=self.token,
            version=self.version,
            expires_at_ms=self.lease_expires_at_ms,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Takeover:
    """The expired lease of another owner (or token) that a claim replaced."""

    owner: str
    expires_at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """One claim attempt's result; `taken_over` names the expired lease a claim replaced."""

    outcome: Outcome
    dispatch_id: str
    lease: Lease | None = None
    dispatch: Dispatch | None = None
    reason: str | None = None
    taken_over: Takeover | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClaimBatch:
    """What one `claim_due` observed and claimed in one transaction."""

    claims: tuple[Claim, ...]
    observed: int

    @property
    def claimed(self) -> tuple[Claim, ...]:
        """The claims that hold a lease now."""
        return tuple(c for c in self.claims if c.outcome in (Outcome.CLAIMED, Outcome.REPLAYED))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Renewal:
    """A renew's result; `lease` is the new fence when renewed."""

    outcome: Outcome
    lease: Lease | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StartRequest:
    """One item of a `start`: the approval and digest it must still match, and the fence."""

    lease: Lease
    approval_request_id: str
    action_digest: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StartResult:
    """Per-item result of `start`; `identity` is set when started or replayed."""

    outcome: Outcome
    dispatch_id: str
    identity: ExecutionIdentity | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ActionReceipt:
    """What a downstream system answered, committed with the completion (migration 0012)."""

    receipt_json: str
    """Canonical JSON (`digests.action_receipt`): a status, headers, digests; no body."""
    receipt_digest: str

    @classmethod
    def from_row(cls, row: RowLike) -> ActionReceipt | None:
        """The `result_receipt_*` columns of an execution row, if it has a receipt."""
        if row["result_receipt_json"] is None:
            return None
        return cls(
            receipt_json=row["result_receipt_json"], receipt_digest=row["result_receipt_digest"]
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """Result of `release_preflight` or `complete`."""

    outcome: Outcome
    dispatch_id: str
    status: states.ExecutionStatus | None = None
    version: int | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionEvent:
    """One immutable line of an execution's history."""

    dispatch_id: str
    version: int
    from_status: states.ExecutionStatus | None
    to_status: states.ExecutionStatus
    attempt: int
    lease_owner: str | None
    lease_token: str | None
    mutation_id: str | None
    result_code: str | None
    committed_at_ms: int

    @classmethod
    def from_row(cls, row: RowLike) -> ExecutionEvent:
        """An `execution_events` row."""
        from_status = row["from_status"]
        return cls(
            dispatch_id=row["dispatch_id"],
            version=row["version"],
            from_status=states.ExecutionStatus(from_status) if from_status else None,
            to_status=states.ExecutionStatus(row["to_status"]),
            attempt=row["attempt"],
            lease_owner=row["lease_owner"],
            lease_token=row["lease_token"],
            mutation_id=row["mutation_id"],
            result_code=row["result_code"],
            committed_at_ms=row["committed_at_ms"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StatusCounts:
    """Counts for `status` and metrics; `recovery_required` is counted apart from executing."""

    executions: Mapping[states.EffectiveStatus, int]
    due: int
    oldest_due_age_ms: int | None
    runs: int
    step_runs: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Tool StepRuns per status (every status present, 0 when none)."""
    expired_leases: int = 0
    """Leased rows whose lease expired before their start (the next claim takes them over)."""
    expired_lease_owners: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Their count per owner, for the few owners holding the most."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Backlog:
    """The gauges a scrape needs, from bounded queries (`due` saturates at the cap)."""

    due: int
    oldest_due_age_ms: int | None
    executing: int
    recovery_required: int
