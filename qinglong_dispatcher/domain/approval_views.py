"""What `approval list` reads: approval requests of one status, each with its plan's preview.

A request waits while it is `pending` and its lifetime has not run out (on the caller's clock
and the database's); the default page shows only those. Any other status shows the stored
status as it is (a request whose lifetime ran out is `expired` once a reconcile pass saw it),
each decided row with who decided, how (`decision_code`) and when. A plan is shown only as
its redacted preview (`plan_previews`).

A cursor is a position in the newest-first order of all requests, so one taken under one
status means the same position under another: it never skips nor repeats a row there.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import errors, keysets, records, waits

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500

CURSOR_FORMAT: Final = "<created_at_ms>:<approval_request_id>"

WAITING: Final = "pending"
ALL: Final = "all"
STATUSES: Final = (WAITING, "approved", "rejected", "expired", "consumed", ALL)
"""What `--status` / `?status=` accept; `pending` (waiting) is the default."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cursor:
    """A keyset position in the newest-first order: the last request a page showed."""

    created_at_ms: int
    approval_request_id: str

    def __str__(self) -> str:
        return f"{self.created_at_ms}:{self.approval_request_id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """A cursor as `approval list` prints it; anything else is `InvalidInput`."""
        created_at_ms, approval_request_id = keysets.parse(text, form=CURSOR_FORMAT)
        return cls(created_at_ms=created_at_ms, approval_request_id=approval_request_id)


def parse_status(text: str) -> str:
    """A `--status` / `?status=` value; anything else is `InvalidInput` naming the field."""
    if text not in STATUSES:
        raise errors.InvalidInput(f"status: must be one of {', '.join(STATUSES)}")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reason:
    """Why a decided request went as it did: a deny vote (`deny`, its reason) or an API
    decision (`approve` or `reject`; a reject's reason code), each with its comment."""

    decision: str
    principal: str
    reason: str | None = None
    comment: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return dataclasses.asdict(self)


def reason_text(said: Reason) -> str:
    """One reason as a line: its code or text, then its comment quoted (`-` for neither)."""
    parts = [said.reason] if said.reason else []
    if said.comment:
        parts.append(json.dumps(said.comment, ensure_ascii=False))
    return " ".join(parts) or "-"


def reasons_of(text: str | None) -> tuple[Reason, ...]:
    """The reasons a list row's `reasons_json` holds (none for a pending request)."""
    if not text:
        return ()
    return tuple(
        Reason(
            decision=str(item["decision"]),
            principal=str(item["principal"]),
            reason=item.get("reason"),
            comment=item.get("comment"),
        )
        for item in json.loads(text)
    )


NEWEST: Final = Cursor(created_at_ms=2**63 - 1, approval_request_id="")
"""A keyset position before every request in the newest-first order."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListQuery:
    """One page of `approval list`: the filters, the page size and where the page starts."""

    action_type: str | None = None
    project_id: str | None = None
    limit: int = DEFAULT_LIMIT
    after: Cursor | None = None
    status: str = WAITING
    from_ms: int | None = None
    """Only requests created at or after this instant (Unix ms)."""
    to_ms: int | None = None
    """Only requests created before this instant (Unix ms)."""

    def __post_init__(self) -> None:
        parse_status(self.status)
        keysets.check_page(
            limit=self.limit,
            max_limit=MAX_LIMIT,
            action_type=self.action_type,
            project_id=self.project_id,
        )
        if self.from_ms is not None and self.to_ms is not None and self.from_ms >= self.to_ms:
            raise errors.InvalidInput("to_ms: must be after from_ms")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WaitingApproval:
    """One row of `approval list`: a request, and for a decided one who decided, how, when."""

    approval_request_id: str
    project_id: str
    action_type: str
    action_ref: str
    action_digest: str
    requested_by: str
    requested_principal: str
    """The authenticated principal that created the request (`requested_by` is a label)."""
    created_at_ms: int
    expires_at_ms: int
    not_before_ms: int | None
    window_for_ms: int | None
    """The requester's narrowing of the window (`waits.Narrowing`); None, None: none named."""
    plan: Mapping[str, object] | None
    """The plan's redacted preview; None when it cannot be shown (see `plan_code`)."""
    plan_code: str | None
    status: str
    decided_by: str | None
    """The decider's label; the reconcile pass's for an expired request."""
    decided_principal: str | None
    decision_code: str | None
    """How it was decided, the audit row's code: `by_requester`, `by_other` or `db_clock`."""
    decided_at_ms: int | None
    """When it was approved, rejected or expired (None while pending, and once consumed: the
    audit trail keeps the approval's time, `consumed_at_ms` the consumption's)."""
    consumed_at_ms: int | None
    reasons: tuple[Reason, ...] = ()
    """Why it was decided so: deny votes' reasons, the API decision's reason and comment."""

    @classmethod
    def from_row(
        cls, row: records.RowLike, *, plan: Mapping[str, object] | None, plan_code: str | None
    ) -> WaitingApproval:
        """A `list_waiting_approvals` or `list_approvals` row with its plan's preview."""
        return cls(
            approval_request_id=row["approval_request_id"],
            project_id=row["project_id"],
            action_type=row["action_type"],
            action_ref=row["action_ref"],
            action_digest=row["action_digest"],
            requested_by=row["requested_by"],
            requested_principal=row["requested_principal"],
            created_at_ms=row["created_at_ms"],
            expires_at_ms=row["expires_at_ms"],
            not_before_ms=row["not_before_ms"],
            window_for_ms=row["window_for_ms"],
            plan=plan,
            plan_code=plan_code,
            status=row["status"],
            decided_by=row["decided_by"],
            decided_principal=row["decided_principal"],
            decision_code=row["decision_code"],
            decided_at_ms=row["decided_at_ms"],
            consumed_at_ms=row["consumed_at_ms"],
            reasons=reasons_of(row["reasons_json"]),
        )

    @property
    def narrowing(self) -> waits.Narrowing:
        """The requester's narrowing of the window, as the approvers approve it."""
        return waits.Narrowing(not_before_ms=self.not_before_ms, window_for_ms=self.window_for_ms)

    @property
    def cursor(self) -> Cursor:
        """The position right after this row."""
        return Cursor(
            created_at_ms=self.created_at_ms, approval_request_id=self.approval_request_id
        )

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["plan"] = None if self.plan is None else dict(self.plan)
        values["reasons"] = [r.as_dict() for r in self.reasons]
        return values


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """A page of waiting requests, newest first; `next` is None on the last page."""

    approvals: tuple[WaitingApproval, ...]
    next: Cursor | None
