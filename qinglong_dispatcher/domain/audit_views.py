"""The security audit log as pages: newest first, by event id, optionally filtered."""

from __future__ import annotations

import dataclasses
from typing import Final

from qinglong_dispatcher.domain import errors, plans, recovery

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
_KIND_MAX: Final = 64


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AuditQuery:
    """One page of the audit log: records older than `before` (an event id), newest first,
    matching every filter that is not None."""

    subject_id: str | None = None
    principal: str | None = None
    kind: str | None = None
    limit: int = DEFAULT_LIMIT
    before: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_LIMIT:
            raise errors.InvalidInput(f"limit: must be between 1 and {MAX_LIMIT}")
        if self.subject_id is not None:
            plans.require_identifier("subject", self.subject_id)
        if self.principal is not None:
            plans.require_identifier("principal", self.principal)
        if self.kind is not None:
            parse_kind(self.kind)
        if self.before is not None and not 0 < self.before < 2**63:
            raise errors.InvalidInput("after: must be a cursor as listed")


@dataclasses.dataclass(frozen=True, slots=True)
class AuditPage:
    """The records of one page and the cursor of the next (None on the last)."""

    events: tuple[recovery.AuditEvent, ...]
    next: int | None


def parse_kind(text: str) -> str:
    """An audit kind filter (`approval.approved`, `api.auth_failed`); `InvalidInput` else."""
    if not (plans.is_identifier(text) and len(text) <= _KIND_MAX):
        raise errors.InvalidInput("kind: must be an audit kind such as approval.approved")
    return text


def parse_cursor(text: str) -> int:
    """The event id a page's `next` printed; `InvalidInput` for anything else."""
    if not text.isdigit() or len(text) > 18 or int(text) == 0:
        raise errors.InvalidInput("after: must be a cursor as listed")
    return int(text)
