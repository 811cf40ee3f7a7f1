"""The targets past a claim, counted for the metrics (both dialects): held and busy.

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


class TargetReadMethods:
    """The store's method over this read (`ports.TargetReadStore`)."""

    runner: query.Runner

    async def target_holders(self, *, now_ms: int) -> targets.HolderCounts:
        """See `ports.TargetReadStore.target_holders`."""
        return await self.runner.transaction(
            lambda q: target_holders(q, now_ms=now_ms), write=False
        )
