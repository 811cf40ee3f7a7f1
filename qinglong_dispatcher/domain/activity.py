"""Recent activity for the event stream: new approval requests and settled dispatches.

Read from the database, so a stream served by one replica shows what every replica and every
CLI did. Both lists are ordered by time and bounded; a reader follows each with an overlapping
window and remembers what it announced (`Window`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from qinglong_dispatcher.domain import ids

APPROVAL_REQUESTED: Final = "approval.requested"
DISPATCH_SETTLED: Final = "dispatch.settled"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Requested:
    """A new approval request (what an approver's queue gained)."""

    approval_request_id: str
    project_id: str
    action_type: str
    requested_by: str
    created_at_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Settled:
    """A dispatch whose execution became terminal."""

    dispatch_id: str
    project_id: str
    action_type: str
    status: str
    result_code: str | None
    settled_at_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class Activity:
    """What happened at or after a time, oldest first, each list at most `limit` long."""

    requested: tuple[Requested, ...]
    settled: tuple[Settled, ...]
    limit: int


def approval_id_floor(since_ms: int) -> str:
    """The least approval request id created at or after `since_ms` (ids begin with their
    creation time, `ids.new_approval_request_id`), for a range read of the primary key."""
    return ids.time_floor("a", max(0, since_ms))


class Window:
    """Follows one time-ordered list with an overlap of `overlap_ms`, announcing each item once:
    a row committed a little after a later one is still announced."""

    def __init__(self, *, start_ms: int, overlap_ms: int) -> None:
        self.overlap_ms = overlap_ms
        self._high_ms = start_ms
        self._seen: dict[str, int] = {}

    @property
    def since_ms(self) -> int:
        """Where the next read starts: the newest time seen, less the overlap."""
        return self._high_ms - self.overlap_ms

    def fresh(self, found: Sequence[tuple[str, int]], *, full: bool) -> list[str]:
        """The keys of `found` ((key, time) pairs, oldest first) not announced before; they
        are announced from now on. `full`: the read hit its limit (a burst)."""
        fresh = [key for key, at_ms in found if key not in self._seen]
        for key, at_ms in found:
            self._seen.setdefault(key, at_ms)
        if found:
            newest = max(at_ms for _, at_ms in found)
            # After a burst longer than one read, the next read starts at its newest row rather
            # than at the same rows again (rows committed late inside a burst may be missed).
            self._high_ms = max(self._high_ms, newest + (self.overlap_ms if full else 0))
        horizon = self._high_ms - 2 * self.overlap_ms
        self._seen = {key: at_ms for key, at_ms in self._seen.items() if at_ms >= horizon}
        return fresh
