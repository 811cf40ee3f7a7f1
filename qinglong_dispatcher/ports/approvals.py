"""The approval store and the plans it binds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final, Protocol

from qinglong_dispatcher.domain import (
    approvals,
    digests,
    errors,
    principals,
    records,
)


class ApprovalStore(Protocol):
    """Approval requests and their one-time consumption into a dispatch."""

    async def create_approval(
        self,
        new: approvals.NewApproval,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> approvals.Approval:
        """Insert the immutable plan and a `pending@v1` request.

        Every write here takes `context` from the API: its audit row (principal, token id,
        client address, request id) commits in the same transaction. None: no such row."""
        ...

    async def vote(
        self,
        approval_request_id: str,
        choice: approvals.Vote,
        *,
        reason: str | None,
        now_ms: int,
        context: principals.RequestContext | None = None,
        voted_by: str | None = None,
        decided_by: str | None = None,
    ) -> approvals.Approval:
        """Cast the store's principal's one vote on a pending request; the database applies
        the request's policy and decides it once the votes reach its numbers (`approved` or
        `rejected`, in this transaction, recording `decided_by`, by default the principal).
        A second vote is `AlreadyVoted` (an `ApprovalStateConflict`). `context`: an API
        request's `api.vote` audit row, naming `voted_by` (the principal's name) as its
        actor."""
        ...

    async def vote_tally(self, approval_request_id: str) -> approvals.Tally | None:
        """The policy a request carries and its votes so far; None without a policy."""
        ...

    async def approve(
        self,
        approval_request_id: str,
        *,
        decided_by: str,
        now_ms: int,
        context: principals.RequestContext | None = None,
        comment: str | None = None,
    ) -> approvals.Approval:
        """`pending@v1 → approved@v2` by the store's authenticated principal.

        Refused (`ApprovalNotPermitted`, `SelfApprovalRefused`) when that principal may not
        approve, or may not approve a request it made itself. A `comment` (the command
        line's) is written with the decision and kept in its `approval.approved` audit row.
        """
        ...

    async def approve_many(
        self, ids: Sequence[str], *, decided_by: str, now_ms: int, comment: str | None = None
    ) -> list[approvals.Approval]:
        """`approve` each request, in order, in one transaction: all or nothing (each with
        the one `comment`).

        The first refusal rolls every approval back and is raised as its own error type,
        its message naming that request and why.
        """
        ...

    async def reject(
        self,
        approval_request_id: str,
        *,
        decided_by: str,
        now_ms: int,
        context: principals.RequestContext | None = None,
        reason: str | None = None,
        comment: str | None = None,
    ) -> approvals.Approval:
        """`pending@v1 → rejected@v2`: the request can never be approved or consumed
        (`reason`: a code an API request records in its audit row; `comment`: as `approve`'s)."""
        ...

    async def consume(
        self,
        approval_request_id: str,
        *,
        now_ms: int,
        max_attempts: int,
        context: principals.RequestContext | None = None,
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


CORRUPT: Final = "plan_corrupt"
"""The code of a stored clear plan whose bytes are not UTF-8 text (a damaged row)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StoredPlan:
    """An immutable action plan row."""

    project_id: str
    action_ref: str
    action_type: str
    plan_json: str
    """The canonical plan (the store opens a sealed one before handing it out)."""
    plan_digest: str
    sealed: approvals.SealedPlan | None = None
    """Only inside the store: the envelope of a plan not opened yet."""
    unreadable: str | None = None
    """Set, with an empty `plan_json`, when the store could not open the plan: the code
    (`plan_key_unknown`, `plan_decrypt_failed`, `plan_keyring_missing`, `plan_corrupt`).
    Never executed."""

    def plan_bytes(self) -> bytes:
        """The canonical plan's bytes; `errors.PlanInvalid` with the store's code when it could
        not be opened (so inspect blocks it: a plan that does not open never executes)."""
        if self.unreadable is not None or self.sealed is not None:
            code = self.unreadable or "plan_sealed"
            raise errors.PlanInvalid("the stored plan cannot be opened", code=code)
        return self.plan_json.encode("utf-8")

    @classmethod
    def from_row(cls, row: records.RowLike) -> StoredPlan:
        """An `action_plans` row, sealed or clear. SQLite hands the clear plan over as its
        bytes: bytes that are not UTF-8 (a damaged row) make it unreadable, `plan_corrupt`,
        so inspect blocks it by name instead of the read failing on every claim."""
        raw = row["plan_json"]
        unreadable = None
        if isinstance(raw, bytes | bytearray):
            try:
                raw = bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                raw, unreadable = "", CORRUPT
        return cls(
            project_id=row["project_id"],
            action_ref=row["action_ref"],
            action_type=row["action_type"],
            plan_json=raw,
            plan_digest=row["plan_digest"],
            sealed=approvals.SealedPlan.from_row(row),
            unreadable=unreadable,
        )


class PlanStore(Protocol):
    """The resolver behind `inspect`: immutable plans by (project, action ref)."""

    @property
    def plan_digests(self) -> digests.PlanDigests:
        """How this store's plans are digested: keyed under the plan key ring's digest
        secret when there is one, plain SHA-256 otherwise."""
        ...

    async def get_plan(self, project_id: str, action_ref: str) -> StoredPlan | None:
        """The plan row, or None."""
        ...

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[StoredPlan]:
        """The plan rows of many (project, action ref) keys in one read; missing ones left out."""
        ...
