"""What waits on a person: the rows of the inbox, who may decide a request, and the filters.

The inbox only reads: each row links to the page where it is decided (an approval request's
page, a dispatch's page with its evidence and settle form), and there the database decides
again. `may_decide` mirrors what the store can tell of a request's policy (`VoteState`), so a
request the viewer may not vote on is never offered; a refusal would still be the database's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from qinglong_dispatcher.domain import policies


class Kind(enum.StrEnum):
    """What kind of wait a row is."""

    APPROVAL = "approval"
    """A pending request the viewer may vote on."""
    RECOVERY = "recovery"
    """A `recovery_required` dispatch, waiting for someone to settle it by hand."""
    DEAD_LETTER = "dead_letter"
    """A notification given up after its attempts: nobody was told (docs/notifications.md)."""


def may_decide(principal: str, requested_principal: str, state: policies.VoteState) -> bool:
    """Whether `principal` may still vote on a pending request: not its requester, not yet
    voted, and in the policy's groups (or the policy names none, or there is no policy)."""
    if principal == requested_principal:
        return False
    if any(v.principal == principal for v in state.votes):
        return False
    return state.may_vote is None or principal in state.may_vote


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Item:
    """One row of the inbox."""

    kind: Kind
    subject_id: str
    """The approval request's id, or the dispatch's."""
    action_type: str
    project_id: str
    since_ms: int
    """Since when it waits: the request's creation, the lease's expiry."""
    summary: str
    """One line: who asked and under which policy, or the evidence's verdict."""
    target: str | None = None
    """The target a `recovery_required` dispatch holds: nothing else starts on it until the
    dispatch is settled (`domain/targets.py`)."""

    def as_dict(self, *, now_ms: int) -> dict[str, object]:
        """The JSON members."""
        return {
            "kind": self.kind.value,
            "id": self.subject_id,
            "action": self.action_type,
            "project": self.project_id,
            "since_ms": self.since_ms,
            "age_ms": max(0, now_ms - self.since_ms),
            "summary": self.summary,
            "target": self.target,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Filter:
    """The inbox's filters and order (action and project are exact, text is a substring)."""

    action_type: str | None = None
    project_id: str | None = None
    text: str | None = None
    newest_first: bool = False

    def matches(self, item: Item) -> bool:
        """Whether `item` passes every filter given."""
        if self.action_type is not None and item.action_type != self.action_type:
            return False
        if self.project_id is not None and item.project_id != self.project_id:
            return False
        if not self.text:
            return True
        needle = self.text.casefold()
        hay = (item.subject_id, item.action_type, item.project_id, item.summary, item.kind.value)
        return any(needle in h.casefold() for h in (*hay, item.target or ""))

    def apply(self, items: Iterable[Item]) -> list[Item]:
        """The matching items, oldest first (newest first when asked), ties by id."""
        kept = sorted(
            (i for i in items if self.matches(i)), key=lambda i: (i.since_ms, i.subject_id)
        )
        return kept[::-1] if self.newest_first else kept
