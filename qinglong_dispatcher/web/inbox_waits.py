"""The operator's inbox rows for dispatches that wait on a person besides a settle: a held
target (its holder `recovery_required`, others waiting behind it) names the target, the
holder and how many wait; a frozen dispatch names the freeze that holds it (`frozen_by F`,
its reason and end) and offers the lift, an operator's who is not its requester."""

from __future__ import annotations

from typing import Final

from qinglong_dispatcher.domain import inbox
from qinglong_dispatcher.web import context

SHOWN: Final = 500
"""Held targets, and frozen dispatches, one inbox reads (the oldest waits first)."""


async def held_targets(ctx: context.Context) -> tuple[list[inbox.Item], bool]:
    """The held targets others wait on, as inbox rows (the id is the holder's); whether that
    was all of them."""
    held = await ctx.store.held_targets(now_ms=ctx.clock.now_ms(), limit=SHOWN + 1)
    items = [
        inbox.Item(
            kind=inbox.Kind.HELD_TARGET,
            subject_id=h.holder_dispatch_id,
            action_type=h.action_type,
            project_id=h.project_id,
            since_ms=h.since_ms,
            summary=(
                f"target {h.target} held by {h.holder_dispatch_id} (recovery_required); "
                f"{h.waiting} waiting: settle the holder to let them start"
            ),
            target=h.target,
            waiting=h.waiting,
        )
        for h in held[:SHOWN]
    ]
    return items, len(held) <= SHOWN


async def frozen_dispatches(ctx: context.Context) -> tuple[list[inbox.Item], bool]:
    """The waiting dispatches a freeze holds now, as inbox rows; whether that was all."""
    frozen = await ctx.store.frozen_dispatches(limit=SHOWN + 1)
    items = [
        inbox.Item(
            kind=inbox.Kind.FROZEN_DISPATCH,
            subject_id=f.dispatch_id,
            action_type=f.action_type,
            project_id=f.project_id,
            since_ms=f.since_ms,
            summary=f"frozen_by {f.freeze_id}: {f.reason}; requested by {f.requested_by}",
            target=f.target,
            freeze=inbox.FreezeRef(freeze_id=f.freeze_id, reason=f.reason, until_ms=f.until_ms),
            requested_by=f.requested_by,
        )
        for f in frozen[:SHOWN]
    ]
    return items, len(frozen) <= SHOWN
