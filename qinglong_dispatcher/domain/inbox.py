"""What waits on a person: the rows of the inbox, who may decide a request, and the filters.

The inbox only reads: each row links to the page where it is decided (an approval request's
page, a dispatch's page with its evidence and settle form, a frozen dispatch's lift page), and
there the database decides again. `may_decide` mirrors what the store can tell of a request's
policy (`VoteState`), so a request the viewer may not vote on is never offered; a refusal
would still be the database's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from qinglong_dispatcher.domain import policies, principals

OLDER_THAN_BOUNDS = (1_000, 365 * 86_400_000, "1 second", "365 days")
"""The shortest and longest `older_than` an inbox takes."""


class Kind(enum.StrEnum):
    """What kind of wait a row is."""

    APPROVAL = "approval"
    """A pending request the viewer may vote on."""
    RECOVERY = "recovery"
    """A `recovery_required` dispatch, waiting for someone to settle it by hand."""
    DEAD_LETTER = "dead_letter"
    """A notification given up after its attempts: nobody was told (docs/notifications.md)."""
    HELD_TARGET = "held_target"
    """A target held by a `recovery_required` dispatch while others wait on it: settling the
    holder (its own `recovery` row) lets them start."""
    FROZEN_DISPATCH = "frozen_dispatch"
    """A waiting dispatch a change freeze holds: an operator who is not its requester may
    lift the freeze for it, with a reason."""


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
    dispatch is settled (`domain/targets.py`); a held target's, a frozen dispatch's."""
    waiting: int | None = None
    """A held target's: how many dispatches wait on it."""
    freeze: FreezeRef | None = None
    """A frozen dispatch's: the freeze that holds it."""
    requested_by: str | None = None
    """A frozen dispatch's requester, who may not lift the freeze for it."""

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
            "waiting": self.waiting,
            "freeze": None if self.freeze is None else self.freeze.as_dict(),
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FreezeRef:
    """The freeze a frozen dispatch waits under: its id, reason and end."""

    freeze_id: int
    reason: str
    until_ms: int

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {"id": self.freeze_id, "reason": self.reason, "until_ms": self.until_ms}


def parse_older_than(text: str) -> int:
    """`older_than`: a wait's least age in milliseconds (`90s`, `30m`, `4h`, `2d`)."""
    return principals.parse_duration(
        text, what="older_than", units="smhd", bounds=OLDER_THAN_BOUNDS
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Filter:
    """The inbox's filters and order (action and project are exact, target a prefix of the
    row's target, so a row without one is left out; older_than the least age; text a
    substring)."""

    action_type: str | None = None
    project_id: str | None = None
    target_prefix: str | None = None
    older_than_ms: int | None = None
    text: str | None = None
    newest_first: bool = False

    def matches(self, item: Item, *, now_ms: int) -> bool:
        """Whether `item` passes every filter given (its age taken at `now_ms`)."""
        if self.action_type is not None and item.action_type != self.action_type:
            return False
        if self.project_id is not None and item.project_id != self.project_id:
            return False
        if self.target_prefix is not None and not (item.target or "").startswith(
            self.target_prefix
        ):
            return False
        if self.older_than_ms is not None and now_ms - item.since_ms < self.older_than_ms:
            return False
        if not self.text:
            return True
        needle = self.text.casefold()
        hay = (item.subject_id, item.action_type, item.project_id, item.summary, item.kind.value)
        return any(needle in h.casefold() for h in (*hay, item.target or ""))

    def apply(self, items: Iterable[Item], *, now_ms: int) -> list[Item]:
        """The matching items at `now_ms`, oldest first (newest first when asked), ties by
        kind and id."""
        kept = sorted(
            (i for i in items if self.matches(i, now_ms=now_ms)),
            key=lambda i: (i.since_ms, i.subject_id, i.kind.value),
        )
        return kept[::-1] if self.newest_first else kept
