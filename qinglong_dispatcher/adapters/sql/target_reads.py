"""The targets past a claim (both dialects): held and busy, counted for the metrics; the held
ones others wait on, listed for the inbox.

The rows read are the partial unique index of targets (`target IS NOT NULL AND status IN
('leased', 'executing')`): one per target, so the read is bounded by the targets in use.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import targets


async def target_holders(q: query.Query, *, now_ms: int) -> targets.HolderCounts:
    """Held (the holder is `recovery_required`) and busy targets, in one snapshot."""
    row = await q.one("target_holders", {"now_ms": now_ms})
    held = int(row["held"])
    return targets.HolderCounts(held=held, busy=int(row["n"]) - held)


async def held_targets(q: query.Query, *, now_ms: int, limit: int) -> list[targets.HeldTarget]:
    """At most `limit` held targets that dispatches wait on, the oldest hold first."""
    rows = await q.all("held_targets", {"now_ms": now_ms, "limit": limit})
    return [targets.HeldTarget.from_row(row) for row in rows]


class TargetReadMethods:
    """The store's methods over these reads (`ports.TargetReadStore`)."""

    runner: query.Runner

    async def target_holders(self, *, now_ms: int) -> targets.HolderCounts:
        """See `ports.TargetReadStore.target_holders`."""
        return await self.runner.transaction(
            lambda q: target_holders(q, now_ms=now_ms), write=False
        )

    async def held_targets(self, *, now_ms: int, limit: int) -> list[targets.HeldTarget]:
        """See `ports.TargetReadStore.held_targets`."""
        return await self.runner.transaction(
            lambda q: held_targets(q, now_ms=now_ms, limit=limit), write=False
        )
