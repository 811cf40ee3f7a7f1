"""The store's reads of dispatches (`dispatch list|show`, `ports.DispatchReadStore`), both
dialects: each a read transaction of `adapters/sql/dispatch_views`, with the built-in actions'
own rows (their Runs) read in the same snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import dispatch_views, query
from qinglong_dispatcher.domain import dispatch_views as dispatch_view_records
from qinglong_dispatcher.domain import plan_previews
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables


class DispatchReadMethods:
    """The store's dispatch reads (a mixin of `SqlStore`)."""

    runner: query.Runner
    envelopes: plan_envelopes.Envelopes
    tables: action_tables.BuiltInTables

    list_dispatches = query.operation(dispatch_views.list_dispatches, write=False)

    async def show_dispatch(
        self,
        dispatch_id: str,
        *,
        now_ms: int,
        shown: plan_previews.ShownFields = plan_previews.IDENTITY_ONLY,
    ) -> dispatch_view_records.Detail | None:
        """See `ports.DispatchReadStore.show_dispatch` (its plan opened to be previewed)."""
        return await self.runner.transaction(
            lambda q: dispatch_views.show_dispatch(
                q,
                dispatch_id,
                self.tables.each,
                now_ms=now_ms,
                shown=shown,
                envelopes=self.envelopes,
            ),
            write=False,
        )

    async def dispatch_run_ids(self, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """See `ports.DispatchReadStore.dispatch_run_ids` (the actions' Runs, one snapshot)."""

        async def read(q: query.Query) -> dict[str, str]:
            found: dict[str, str] = {}
            for own in self.tables.each:
                found |= await own.run_ids(q, dispatch_ids)
            return found

        return await self.runner.transaction(read, write=False)

    recent_activity = query.operation(dispatch_views.recent_activity, write=False)
    requested_again = query.operation(dispatch_views.requested_again, write=False)
