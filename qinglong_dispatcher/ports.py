"""Ports: the store protocols the dispatcher, actions, recovery and CLI are written against."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Protocol

from qinglong_dispatcher.domain import (
    approvals,
    cancels,
    dispatch_views,
    records,
    recovery,
    retention,
    runs,
    schema,
    states,
)
from qinglong_dispatcher.tools import ports as tool_ports

BACKLOG_CAP = 100_000
"""Where the due gauge saturates: a scrape never reads more of the due index than this."""


class Clock(Protocol):
    """Milliseconds since the epoch; tests inject one they can move."""

    def now_ms(self) -> int:
        """The current time in milliseconds."""
        ...


class ExecutionStore(Protocol):
    """Claim, renew, start, release and complete executions under fences (DESIGN.md §3)."""

    async def claim_due(
        self, *, now_ms: int, owner: str, limit: int, lease_ms: int
    ) -> records.ClaimBatch:
        """One due observation (≤ limit rows) and a fenced claim of each, in one transaction."""
        ...

    async def claim(
        self, dispatch_id: str, *, now_ms: int, owner: str, token: str, lease_ms: int
    ) -> records.Claim:
        """Claim one row by id with the caller's token; replays an unexpired same-token lease."""
        ...

    async def renew(self, lease: records.Lease, *, now_ms: int, lease_ms: int) -> records.Renewal:
        """Extend an unexpired lease carrying the exact current version."""
        ...

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        """Commit the start barrier (`leased → executing`) of each item; per-item results.

        The barrier also grants the item a fresh lease of `lease_ms` from `now_ms` (never a
        shorter one than it holds), so an execute never begins on the tail of a lease.
        """
        ...

    async def release_preflight(
        self,
        lease: records.Lease,
        *,
        mutation_id: str,
        kind: states.ReleaseKind,
        result_code: str,
        retry_at_ms: int | None,
        now_ms: int,
    ) -> records.Transition:
        """Give back a claim before the barrier: retry, blocked or the shutdown yield."""
        ...

    async def complete(
        self,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
    ) -> records.Transition:
        """Record the terminal result of a started execution under its fence."""
        ...

    async def list_due(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[records.Execution]:
        """Read-only keyset page over the due index."""
        ...

    async def counts(self, *, now_ms: int) -> records.StatusCounts:
        """Counts per effective status, the due backlog and the number of Runs."""
        ...

    async def backlog(self, *, now_ms: int, cap: int = BACKLOG_CAP) -> records.Backlog:
        """Due count (saturating at `cap`), oldest due age, executing and recovery_required."""
        ...

    async def get_execution(self, dispatch_id: str) -> records.Execution | None:
        """One execution row."""
        ...

    async def get_dispatch(self, dispatch_id: str) -> records.Dispatch | None:
        """One immutable dispatch."""
        ...

    async def execution_events(self, dispatch_id: str) -> list[records.ExecutionEvent]:
        """The history of one execution, oldest first."""
        ...


class ApprovalStore(Protocol):
    """Approval requests and their one-time consumption into a dispatch."""

    async def create_approval(
        self, new: approvals.NewApproval, *, now_ms: int
    ) -> approvals.Approval:
        """Insert the immutable plan and a `pending@v1` request."""
        ...

    async def approve(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approvals.Approval:
        """`pending@v1 → approved@v2` by the store's authenticated principal.

        Refused (`ApprovalNotPermitted`, `SelfApprovalRefused`) when that principal may not
        approve, or may not approve a request it made itself.
        """
        ...

    async def reject(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approvals.Approval:
        """`pending@v1 → rejected@v2`: the request can never be approved or consumed."""
        ...

    async def consume(
        self, approval_request_id: str, *, now_ms: int, max_attempts: int
    ) -> approvals.Consumed:
        """`approved@v2 → consumed@v3` + dispatch + execution `pending@v0`, atomically."""
        ...

    async def submit(
        self,
        items: Sequence[approvals.NewApproval],
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> list[approvals.Consumed]:
        """Create, approve and consume every item in one transaction: all or nothing.

        A self-approval: refused whole, like `approve`, where it is not allowed.
        """
        ...

    async def get_approval(self, approval_request_id: str) -> approvals.Approval | None:
        """One approval request."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StoredPlan:
    """An immutable action plan row."""

    project_id: str
    action_ref: str
    action_type: str
    plan_json: str
    plan_digest: str

    @classmethod
    def from_row(cls, row: records.RowLike) -> StoredPlan:
        """An `action_plans` row."""
        return cls(
            project_id=row["project_id"],
            action_ref=row["action_ref"],
            action_type=row["action_type"],
            plan_json=row["plan_json"],
            plan_digest=row["plan_digest"],
        )


class PlanStore(Protocol):
    """The resolver behind `inspect`: immutable plans by (project, action ref)."""

    async def get_plan(self, project_id: str, action_ref: str) -> StoredPlan | None:
        """The plan row, or None."""
        ...

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[StoredPlan]:
        """The plan rows of many (project, action ref) keys in one read; missing ones left out."""
        ...


class RunCreateOutcome(enum.StrEnum):
    """Results of the `run.create` effect transaction."""

    CREATED = "created"
    EXISTING = "existing"
    CONFLICT = "conflict"
    FENCED = "fenced"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCreateRequest:
    """Everything the `run.create` effect transaction binds."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity
    run: runs.Run
    mutation_id: str
    now_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunCreateResult:
    """The effect transaction's result; `run` and `receipt` are set when created or existing."""

    outcome: RunCreateOutcome
    run: runs.Run | None = None
    receipt: runs.RunReceipt | None = None
    reason: str | None = None


class RunCreateRepository(Protocol):
    """Run + attempt + event + receipt + completion in one transaction (ADR-0034)."""

    async def create_run(self, request: RunCreateRequest) -> RunCreateResult:
        """Create the Run or replay it from its receipt; never a Run without a receipt."""
        ...

    async def get_receipt(self, dispatch_id: str) -> runs.RunReceipt | None:
        """The receipt of a dispatch, by primary key."""
        ...

    async def get_run_by_key(self, project_id: str, idempotency_key: str) -> runs.Run | None:
        """The Run holding an idempotency key, by unique key."""
        ...

    async def get_run(self, run_id: str) -> runs.Run | None:
        """One Run by primary key."""
        ...


class PageOutcome(enum.StrEnum):
    """What the page transaction did with one item."""

    COMMITTED = "committed"
    """Started, its effect, receipt and completion committed with the page: `succeeded`."""
    NOT_TAKEN = "not_taken"
    """Nothing written for it: it takes the per-item path under the same lease."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PageItem:
    """One transactional item of a page: its start barrier request and the Run it creates.

    `run` is built for the page's `now_ms` (its `accepted_at_ms` is the start time)."""

    request: records.StartRequest
    dispatch: records.Dispatch
    run: runs.Run


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PageResult:
    """One item's result; `identity` (the started fence) is set when committed."""

    dispatch_id: str
    outcome: PageOutcome
    identity: records.ExecutionIdentity | None = None
    reason: str | None = None


class PageStore(Protocol):
    """The page transaction of transactional actions (README, "A page in one transaction")."""

    async def commit_page(
        self, items: Sequence[PageItem], *, now_ms: int, lease_ms: int
    ) -> list[PageResult]:
        """In ONE transaction, for each item: the fenced start (`leased → executing`), the
        effect (Run, attempt, RunEvent), the receipt and the completion (`executing →
        succeeded`), each with its ledger line. An item refused or failing is undone alone
        (`not_taken`); a crash before the commit leaves every item unstarted."""
        ...


class DispatchStore(ExecutionStore, PageStore, Protocol):
    """What the dispatcher needs of a store: executions and the page transaction."""


class RecoveryStore(Protocol):
    """Listing and settling `recovery_required` executions; nothing here can execute."""

    async def list_recovery_required(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[recovery.Snapshot]:
        """A keyset page (by lease expiry) of executing rows whose lease expired."""
        ...

    async def resolve_recovery(
        self, resolution: recovery.Resolution, *, now_ms: int
    ) -> records.Transition:
        """Settle one row if it still matches the snapshot fence; records who decided."""
        ...

    async def record_observation(
        self,
        dispatch_id: str,
        *,
        outcome: recovery.ObservationOutcome,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """Upsert the last reconcile outcome of a dispatch."""
        ...

    async def get_resolution(self, dispatch_id: str) -> recovery.StoredResolution | None:
        """The resolution of a dispatch, if one committed."""
        ...

    async def audit_events(self, subject_id: str) -> list[recovery.AuditEvent]:
        """Security audit records about one subject (a dispatch id)."""
        ...


class CancelStore(Protocol):
    """An operator cancels a waiting dispatch (`dispatch cancel`)."""

    async def cancel_dispatch(self, request: cancels.Cancel, *, now_ms: int) -> records.Transition:
        """Move a `pending`/`retry_wait` row to `cancelled`, with its ledger line and audit
        record, under the claim's fence. COMPLETED, or NOT_FOUND, or CONFLICT with the status
        found (`reason` is that status, or `raced` when a claim committed in between)."""
        ...


class DispatchReadStore(Protocol):
    """What operators read about dispatches (`dispatch list|show`); it writes nothing and
    hands out no lease token. Effective statuses are decided on the earlier of `now_ms` and
    the database's clock, as `counts` decides them."""

    async def list_dispatches(
        self, request: dispatch_views.ListQuery, *, now_ms: int
    ) -> dispatch_views.Page:
        """A keyset page of dispatches, newest first (created_at_ms, then id, descending)."""
        ...

    async def show_dispatch(self, dispatch_id: str, *, now_ms: int) -> dispatch_views.Detail | None:
        """One dispatch with its plan's plain fields, execution, ledger, receipt and Run,
        recovery and StepRun, in one store call; None when there is no such dispatch."""
        ...

    async def dispatch_run_ids(self, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """The Run id of each dispatch whose Run exists (by idempotency key)."""
        ...


class PruneStore(Protocol):
    """Retention: deleting finished dispatch trees and old audit records (migration 0009)."""

    async def prune_batch(
        self, *, cutoff_ms: int, audit_cutoff_ms: int, limit: int, dry_run: bool = False
    ) -> retention.PruneCounts:
        """One transaction: up to `limit` terminal dispatch trees finished before `cutoff_ms`
        and up to `limit` audit records committed before `audit_cutoff_ms`, with the counts.
        With `dry_run`, what a whole prune would remove now, writing nothing."""
        ...

    async def reclaim_space(self, *, max_pages: int) -> int:
        """Give up to `max_pages` free pages back to the file system (SQLite's incremental
        vacuum); the pages freed. PostgreSQL's autovacuum does this itself: 0."""
        ...


class Store(
    ExecutionStore,
    ApprovalStore,
    PlanStore,
    RunCreateRepository,
    PageStore,
    RecoveryStore,
    CancelStore,
    DispatchReadStore,
    PruneStore,
    tool_ports.ToolStepRepository,
    tool_ports.ToolExecutionStartBarrierRepository,
    Protocol,
):
    """One dialect's whole store."""

    dialect: str

    async def migrate(self, *, now_ms: int) -> list[int]:
        """Apply pending migrations (holding the dialect's migration lock); the versions applied."""
        ...

    async def schema_state(self) -> schema.SchemaState:
        """How the database's applied migrations compare with this release."""
        ...

    async def check_durability(self) -> None:
        """Raise `DurabilityRefused` unless commits are durable (DESIGN.md §1)."""
        ...

    async def check_integrity(self) -> None:
        """Raise `StoreCorrupted` naming the database if its pages are damaged (`run`, `tick`)."""
        ...

    async def database_now_ms(self) -> int:
        """The database's own clock (ledger `committed_at_ms` uses it; the skew guard reads it)."""
        ...

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """Why the connected role could change the schema (empty: it cannot; `run` warns)."""
        ...

    async def public_privileges(self) -> tuple[str, ...]:
        """What every login may do to the database that no role of ours needs (`TEMP`,
        `CREATE`): a temporary object is the first step of a known attack; `migrate` warns."""
        ...

    @property
    def commits(self) -> int:
        """Write transactions committed through this store (the benchmark counts them)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
