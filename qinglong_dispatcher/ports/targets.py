"""Targets as the metrics read them (how many are held and how many busy) and as the inbox
lists them (the held ones others wait on)."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import targets


class TargetReadStore(Protocol):
    """The targets past a claim, counted."""

    async def target_holders(self, *, now_ms: int) -> targets.HolderCounts:
        """The targets held (their one row past its claim is `recovery_required` by the
        caller's clock and the database's) and busy (leased or executing, the lease live)."""
        ...

    async def held_targets(self, *, now_ms: int, limit: int) -> list[targets.HeldTarget]:
        """At most `limit` held targets (their holder `recovery_required` as `target_holders`
        decides) that dispatches wait on, the oldest hold first, each with how many wait."""
        ...
