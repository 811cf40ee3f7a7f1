"""Writing, ending, listing and lifting change freezes (both dialects): `freeze add|list|end`
and `dispatch lift-freeze`.

The database holds the rules (migration 0035): it names each freeze's writer and time, audits
it, and on PostgreSQL admits only the schema's owner (any other login is refused `42501`,
surfaced here as `FreezeRefused`); a lift is an operator's who is not the dispatch's requester
(`QLZ02`, `42501`), likewise surfaced. The claim and the start guard read the freezes; this
module only writes them and reads them back.
"""

from __future__ import annotations

from typing import TypeVar

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approvals, errors, freezes, permissions

OWNER_ONLY = (
    "only the schema's owner writes and ends freezes: on PostgreSQL run this with the "
    "administrator URL that runs migrate (the database refused this login)"
)
T = TypeVar("T")

LIFT_REFUSED = (
    "the database refused the lift: an operator who is not the dispatch's requester lifts a "
    "freeze for it"
)


def _freeze(row: query.Row) -> freezes.Freeze:
    return freezes.Freeze(
        freeze_id=int(row["freeze_id"]),
        action_type=row["action_type"],
        project_id=row["project_id"],
        target_prefix=row["target_prefix"],
        from_ms=int(row["from_ms"]),
        until_ms=int(row["until_ms"]),
        reason=row["reason"],
        created_by=row["created_by"],
        created_at_ms=int(row["created_at_ms"]),
        ended_by=row["ended_by"],
        ended_at_ms=None if row["ended_at_ms"] is None else int(row["ended_at_ms"]),
    )


async def add_freeze(
    q: query.Query, principal: approvals.Principal, new: freezes.NewFreeze
) -> freezes.Freeze:
    """Write `new`; the freeze written."""
    new.check()
    row = await q.one(
        "insert_freeze",
        {
            "action_type": new.action_type,
            "project_id": new.project_id,
            "target_prefix": new.target_prefix,
            "from_ms": new.from_ms,
            "until_ms": new.until_ms,
            "reason": new.reason,
            "principal": principal.name,
        },
    )
    assert row is not None
    return _freeze(row)


async def end_freeze(
    q: query.Query, principal: approvals.Principal, freeze_id: int
) -> freezes.Freeze:
    """End the open freeze `freeze_id` now; it, ended."""
    row = await q.one("end_freeze", {"freeze_id": freeze_id, "principal": principal.name})
    if row is None:
        raise errors.FreezeNotFound(f"no open freeze {freeze_id}")
    return _freeze(row)


async def list_freezes(q: query.Query, *, with_ended: bool = False) -> list[freezes.Freeze]:
    """The freezes in force or to come (with `with_ended`, every one), newest first."""
    return [_freeze(row) for row in await q.all("list_freezes", {"with_ended": with_ended})]


async def freezes_covering(q: query.Query, dispatch_id: str) -> list[int]:
    """The freezes holding `dispatch_id` now, not lifted for it."""
    rows = await q.all("freezes_covering", {"dispatch_id": dispatch_id})
    return [int(row["freeze_id"]) for row in rows]


async def count_frozen(q: query.Query) -> int:
    """How many waiting dispatches a freeze holds now (0 at once when none is in force)."""
    row = await q.one("count_frozen")
    return 0 if row is None else int(row["n"])


async def frozen_dispatches(q: query.Query, *, limit: int) -> list[freezes.FrozenDispatch]:
    """At most `limit` waiting dispatches a freeze holds now, the oldest wait first."""
    rows = await q.all("frozen_dispatches", {"limit": limit})
    return [freezes.FrozenDispatch.from_row(row) for row in rows]


async def lift_freeze(
    q: query.Query, principal: approvals.Principal, dispatch_id: str, *, reason: str
) -> list[int]:
    """Lift every freeze covering `dispatch_id` now, for it alone; the freezes lifted."""
    freezes.check_reason(reason)
    rows = await q.all(
        "lift_freezes",
        {"dispatch_id": dispatch_id, "reason": reason, "principal": principal.name},
    )
    return sorted(int(row["freeze_id"]) for row in rows)


class FreezeMethods:
    """The freeze operations of `SqlStore`, written as its principal."""

    runner: query.Runner
    approver: approvals.Principal

    async def add_freeze(self, new: freezes.NewFreeze) -> freezes.Freeze:
        """See `ports.FreezeStore.add_freeze`."""
        return await self._freeze_write(lambda q: add_freeze(q, self.approver, new), OWNER_ONLY)

    async def end_freeze(self, freeze_id: int) -> freezes.Freeze:
        """See `ports.FreezeStore.end_freeze`."""
        return await self._freeze_write(
            lambda q: end_freeze(q, self.approver, freeze_id), OWNER_ONLY
        )

    async def lift_freeze(self, dispatch_id: str, *, reason: str) -> list[int]:
        """See `ports.FreezeStore.lift_freeze` (an API principal must be permitted: on SQLite
        the store applies the permission table, on PostgreSQL the grants decide)."""
        self.approver.require(permissions.Operation.LIFT)
        return await self._freeze_write(
            lambda q: lift_freeze(q, self.approver, dispatch_id, reason=reason), LIFT_REFUSED
        )

    async def _freeze_write(self, work: query.Work[T], refused_as: str) -> T:
        """One write transaction; the database's refusal of the writer as `FreezeRefused`."""
        try:
            return await self.runner.transaction(work)
        except errors.TransitionRefused as refused:
            raise errors.FreezeRefused(refused_as) from refused
        except errors.StoreError as refused:
            if refused.code == "permission_denied":
                raise errors.FreezeRefused(refused_as) from refused
            raise

    list_freezes = query.operation(list_freezes, write=False)
    freezes_covering = query.operation(freezes_covering, write=False)
    count_frozen = query.operation(count_frozen, write=False)
    frozen_dispatches = query.operation(frozen_dispatches, write=False)
