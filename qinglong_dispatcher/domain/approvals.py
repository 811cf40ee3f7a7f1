"""Approval requests: pending@v1 → approved@v2 → consumed@v3 (or rejected, expired)."""

from __future__ import annotations

import dataclasses
import enum

from qinglong_dispatcher.domain import errors, permissions, records, waits


class ApprovalStatus(enum.StrEnum):
    """The stored status of an approval request."""

    PENDING = "pending"
    APPROVED = "approved"
    CONSUMED = "consumed"
    REJECTED = "rejected"
    EXPIRED = "expired"


VERSION_OF = {
    ApprovalStatus.PENDING: 1,
    ApprovalStatus.APPROVED: 2,
    ApprovalStatus.REJECTED: 2,
    ApprovalStatus.EXPIRED: 2,
    ApprovalStatus.CONSUMED: 3,
}
"""The version each state carries: one step from pending, two to consumed."""

TRANSITIONS = frozenset(
    {
        (ApprovalStatus.PENDING, ApprovalStatus.APPROVED),
        (ApprovalStatus.PENDING, ApprovalStatus.REJECTED),
        (ApprovalStatus.PENDING, ApprovalStatus.EXPIRED),
        (ApprovalStatus.APPROVED, ApprovalStatus.CONSUMED),
    }
)
"""Every change the stores (and the PostgreSQL trigger) allow. `approved → expired` is not
one: an approved request past its expiry is dead by time (consume refuses it) and keeps the
approver's decision columns as they were."""


class Vote(enum.StrEnum):
    """A principal's vote on a request under its policy (docs/security.md#approval-policies)."""

    APPROVE = "approve"
    DENY = "deny"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tally:
    """The policy a request carries and its votes so far (`approval vote` prints it)."""

    policy_name: str
    approvals_required: int
    denials_to_reject: int
    approvals: int
    denials: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> Tally:
        """Build from a `vote_tally` row."""
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})


TERMINAL = frozenset({ApprovalStatus.CONSUMED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED})
"""States nothing leaves."""

AUDIT_KIND_CREATED = "approval.created"
"""The `security_audit_events.kind` of a new request; a change writes `approval.<status>`."""


def audit_kind(status: ApprovalStatus) -> str:
    """The audit kind the database writes when a request enters `status`."""
    return AUDIT_KIND_CREATED if status is ApprovalStatus.PENDING else f"approval.{status.value}"


def check_self_approval(*, requester: str, approver: str, self_approval: bool) -> None:
    """Separation of duties: the approver must not be the requester unless that is allowed.

    Both are authenticated principals (never the free-text labels). On PostgreSQL the
    database applies the same rule with `qinglong_self_approver` in place of the setting.
    """
    if approver == requester and not self_approval:
        raise errors.SelfApprovalRefused(
            f"principal {approver} requested this approval and may not approve it "
            "(self-approval is off)"
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who acts on approvals through a store, and who applies separation of duties.

    `name` is None where the database names the session's login itself (PostgreSQL writes
    `session_user` and its trigger applies the roles); a store that knows its principal
    (SQLite: the OS user) names it and applies `self_approval` (`QINGLONG_SELF_APPROVAL`).
    """

    name: str | None
    self_approval: bool = True
    role: str | None = None
    """The token role (`principals.TokenRole`) of an API principal on SQLite, which the store
    applies; None for the OS user (the file's owner may do everything) and on PostgreSQL."""

    def require(self, operation: permissions.Operation) -> None:
        """Refuse an operation the token's role may not perform (`permissions.MAY`):
        `ApprovalNotPermitted` for an approval step, else `PrincipalNotPermitted`; nothing to
        check without a role."""
        if self.role is None or permissions.permits(self.role, operation):
            return
        message = f"principal {self.name} ({self.role}) may not take this step"
        if operation in permissions.APPROVAL_STEPS:
            raise errors.ApprovalNotPermitted(message)
        raise errors.PrincipalNotPermitted(message)

    def check_may_approve(self, requester: str) -> None:
        """Refuse an approval of `requester`'s own request unless self-approval is allowed."""
        if self.name is not None:
            check_self_approval(
                requester=requester, approver=self.name, self_approval=self.self_approval
            )


DATABASE_PRINCIPAL = Principal(name=None)
"""The database authenticates the session and decides (PostgreSQL)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Approval:
    """An approval request as stored."""

    approval_request_id: str
    project_id: str
    action_type: str
    action_ref: str
    action_digest: str
    status: ApprovalStatus
    version: int
    requested_by: str
    decided_by: str | None
    requested_principal: str
    """The authenticated principal that created the request (`requested_by` is a label)."""
    decided_principal: str | None
    """Who approved, rejected or expired it; None while pending."""
    consumed_principal: str | None
    """Who consumed it into its dispatch; None until consumed."""
    expires_at_ms: int
    created_at_ms: int
    updated_at_ms: int
    traceparent: str | None = None
    """The W3C trace context it was requested under (`domain.traces`); None: none named."""
    resubmitted_from: str | None = None
    """What it was requested again from (decision 0048): the failed, blocked or cancelled
    dispatch, or the expired request; None for a request made afresh."""
    not_before_ms: int | None = None
    window_for_ms: int | None = None
    """The requester's narrowing of the window (`waits.Narrowing`), what the approvers
    approve with it; None, None: none named."""

    @classmethod
    def from_row(cls, row: records.RowLike) -> Approval:
        """Build from a row keyed by column name."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["status"] = ApprovalStatus(str(row["status"]))
        return cls(**values)

    @property
    def narrowing(self) -> waits.Narrowing:
        """The requester's narrowing of the window, as the approvers approve it."""
        return waits.Narrowing(not_before_ms=self.not_before_ms, window_for_ms=self.window_for_ms)

    def is_expired(self, now_ms: int) -> bool:
        """An approval is usable only strictly before its expiry."""
        return now_ms >= self.expires_at_ms


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NewApproval:
    """What `create_approval` writes: the plan row and the pending request."""

    approval_request_id: str
    project_id: str
    action_type: str
    action_ref: str
    plan_json: str
    """The canonical plan; empty once the store sealed it (`sealed`)."""
    plan_digest: str
    action_digest: str
    requested_by: str
    expires_at_ms: int
    sealed: SealedPlan | None = None
    target: str | None = None
    """The plan's target (`plans.plan_target`), kept in clear beside it: the database copies
    it into the dispatch and its execution."""
    traceparent: str | None = None
    """The W3C trace context it was requested under (`traces.parse_traceparent`): the
    database copies it into the dispatch; the dispatcher's spans and the effects join it."""
    resubmitted_from: str | None = None
    """What it is requested again from (`Approval.resubmitted_from`), which the database
    checks."""
    not_before_ms: int | None = None
    window_for_ms: int | None = None
    """The requester's narrowing of the window (`waits.Narrowing`): the database intersects
    it with the policy's when it writes the dispatch."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SealedPlan:
    """A plan encrypted at rest: the key that opens it, the algorithm, nonce + ciphertext + tag,
    and the plan's schema version (part of the associated data, known without opening it)."""

    key_id: str
    algorithm: str
    data: bytes
    schema_version: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> SealedPlan | None:
        """The envelope columns of an `action_plans` row; None for a clear plan."""
        if row["plan_sealed"] is None:
            return None
        return cls(
            key_id=row["plan_key_id"],
            algorithm=row["plan_algorithm"],
            data=bytes(row["plan_sealed"]),
            schema_version=row["plan_schema_version"],
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Consumed:
    """The result of consuming an approval: the dispatch it became."""

    approval_request_id: str
    dispatch_id: str
    action_ref: str


EXPIRED_BY = "expiry"
"""The `decided_by` label of an expired request: the database's clock decided, not a person
(the row's `decided_principal` names the runtime that swept it)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Expired:
    """A pending request the reconcile pass expired (its lifetime ran out, database clock)."""

    approval_request_id: str
    project_id: str
    action_type: str
