"""What an approval request's policy and votes look like to a reader (the API, the UI).

The database holds the policies, copies one into each request and counts the votes
(docs/security.md#approval-policies); these values only show that state: nothing here
decides who may vote.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections.abc import Sequence
from typing import Final

from qinglong_dispatcher.domain import approvals, errors, records

REASON_MAX: Final = 500
"""The longest reason a vote carries, in characters."""


def check_reason(text: str | None) -> str | None:
    """A vote's reason as stored: one line of text, trimmed, at most `REASON_MAX` characters
    (None or blank: none; a policy asking for reasons refuses that itself)."""
    if text is None or not text.strip():
        return None
    shown = text.strip()
    if len(shown) > REASON_MAX:
        raise errors.InvalidInput(f"reason: at most {REASON_MAX} characters")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in shown):
        raise errors.InvalidInput("reason: one line of text, without control characters")
    return shown


def groups_of(value: object) -> tuple[str, ...]:
    """A policy's approver groups as the dialect stores them (PostgreSQL's `TEXT[]`, SQLite's
    JSON array text), sorted."""
    if isinstance(value, str):
        value = json.loads(value)
    assert isinstance(value, Sequence)
    return tuple(sorted(str(g) for g in value))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RequestPolicy:
    """The policy copied into one request when it was written (never changed after)."""

    name: str
    version: int
    approvals_required: int
    denials_to_reject: int
    approver_groups: tuple[str, ...]
    """Empty: any approver who is not the requester."""
    reason_required: bool
    target_prefix: str | None = None
    """The prefix of the request's target that chose this policy; None: the policy names none."""

    @classmethod
    def from_row(cls, row: records.RowLike) -> RequestPolicy:
        """An `approval_request_policies` row."""
        return cls(
            name=row["policy_name"],
            version=int(row["policy_version"]),
            approvals_required=int(row["approvals_required"]),
            denials_to_reject=int(row["denials_to_reject"]),
            approver_groups=groups_of(row["approver_groups"]),
            reason_required=bool(row["reason_required"]),
            target_prefix=row["target_prefix"],
        )

    def as_dict(self) -> dict[str, object]:
        """The JSON members."""
        return {
            "name": self.name,
            "version": self.version,
            "approvals_required": self.approvals_required,
            "denials_to_reject": self.denials_to_reject,
            "approver_groups": list(self.approver_groups),
            "reason_required": self.reason_required,
            "target_prefix": self.target_prefix,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CastVote:
    """One principal's vote, at the database's time."""

    principal: str
    vote: approvals.Vote
    reason: str | None
    voted_at_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> CastVote:
        """An `approval_votes` row."""
        return cls(
            principal=row["principal"],
            vote=approvals.Vote(row["vote"]),
            reason=row["reason"],
            voted_at_ms=int(row["voted_at_ms"]),
        )

    def as_dict(self) -> dict[str, object]:
        """The JSON members."""
        return {
            "principal": self.principal,
            "vote": self.vote.value,
            "reason": self.reason,
            "voted_at_ms": self.voted_at_ms,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class VoteState:
    """A request's policy, its votes so far, who else may vote, and when it expires."""

    policy: RequestPolicy | None
    """None: no policy; one approval or one rejection decides it."""
    votes: tuple[CastVote, ...]
    """Oldest first."""
    may_vote: tuple[str, ...] | None
    """The principals who may still vote, as the store can read them: the members of the
    policy's groups who have not voted, the requester left out; empty once the request is
    decided. None: the policy names no group, or there is no policy (any approver but the
    requester may)."""
    expires_at_ms: int
    """By the database's clock (`db_expires_at_ms` when the database set it)."""

    def count(self, vote: approvals.Vote) -> int:
        """How many votes of this kind were cast."""
        return sum(1 for v in self.votes if v.vote is vote)

    def as_dict(self, *, now_ms: int) -> dict[str, object]:
        """The JSON members the approval resource gains."""
        return {
            "policy": None if self.policy is None else self.policy.as_dict(),
            "votes": [v.as_dict() for v in self.votes],
            "approvals": self.count(approvals.Vote.APPROVE),
            "denials": self.count(approvals.Vote.DENY),
            "may_vote": None if self.may_vote is None else list(self.may_vote),
            "expires_at_ms": self.expires_at_ms,
            "expires_in_ms": max(0, self.expires_at_ms - now_ms),
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PolicyInForce:
    """The newest version of one policy name, unless that version retired it."""

    name: str
    version: int
    action_type: str
    project_id: str | None
    """None: every project."""
    target_prefix: str | None
    """None: every target."""
    approvals_required: int
    denials_to_reject: int
    approver_groups: tuple[str, ...]
    reason_required: bool
    written_by: str
    written_at_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> PolicyInForce:
        """An `approval_policies` row."""
        return cls(
            name=row["name"],
            version=int(row["version"]),
            action_type=row["action_type"],
            project_id=row["project_id"],
            target_prefix=row["target_prefix"],
            approvals_required=int(row["approvals_required"]),
            denials_to_reject=int(row["denials_to_reject"]),
            approver_groups=groups_of(row["approver_groups"]),
            reason_required=bool(row["reason_required"]),
            written_by=row["written_by"],
            written_at_ms=int(row["written_at_ms"]),
        )

    def as_dict(self) -> dict[str, object]:
        """The JSON members."""
        return dataclasses.asdict(self) | {"approver_groups": list(self.approver_groups)}
