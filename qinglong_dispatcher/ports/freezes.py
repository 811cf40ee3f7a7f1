"""Change freezes: written and ended by the administrator, lifted for one dispatch by an
operator who is not its requester (the database decides who may, migration 0035)."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import freezes


class FreezeLiftStore(Protocol):
    """A freeze lifted for one dispatch: what a store acting as a principal offers."""

    async def lift_freeze(self, dispatch_id: str, *, reason: str) -> list[int]:
        """Lift for one dispatch every freeze covering it now; the freezes lifted (none: no
        freeze covers it). `FreezeRefused` for the dispatch's requester and for a principal
        who is not an operator."""
        ...


class FreezeStore(FreezeLiftStore, Protocol):
    """Freezes and their lifts."""

    async def add_freeze(self, new: freezes.NewFreeze) -> freezes.Freeze:
        """Write a freeze (the schema's owner only on PostgreSQL: `FreezeRefused` else)."""
        ...

    async def end_freeze(self, freeze_id: int) -> freezes.Freeze:
        """End a freeze now (the schema's owner only); `FreezeNotFound` for none open."""
        ...

    async def list_freezes(self, *, with_ended: bool = False) -> list[freezes.Freeze]:
        """The freezes in force or still to come (and, asked, the ended and past ones),
        newest first; at most 200."""
        ...

    async def freezes_covering(self, dispatch_id: str) -> list[int]:
        """The freezes that hold one dispatch now, not lifted for it."""
        ...

    async def count_frozen(self) -> int:
        """How many waiting dispatches a freeze holds now, not lifted for them."""
        ...

    async def frozen_dispatches(self, *, limit: int) -> list[freezes.FrozenDispatch]:
        """At most `limit` waiting dispatches a freeze holds now (each with the least freeze
        that does), the oldest wait first."""
        ...
