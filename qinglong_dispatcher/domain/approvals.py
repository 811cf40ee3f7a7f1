"""Approval requests: pending@v1 → approved@v2 → consumed@v3 (or rejected, expired)."""

from __future__ import annotations

import dataclasses
import enum

from qinglong_dispatcher.domain import records


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
    ApprovalStatus.CONSUMED: 3,
}
"""The version each state of the happy path carries (ADR-0031)."""


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
    expires_at_ms: int
    created_at_ms: int
    updated_at_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> Approval:
        """Build from a row keyed by column name."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        values["status"] = ApprovalStatus(str(row["status"]))
        return cls(**values)

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
    plan_digest: str
    action_digest: str
    requested_by: str
    expires_at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Consumed:
    """The result of consuming an approval: the dispatch it became."""

    approval_request_id: str
    dispatch_id: str
    action_ref: str
