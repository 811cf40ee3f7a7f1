"""What operators read and decide about dispatches: list, show, cancel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from qinglong_dispatcher.domain import (
    cancels,
    dispatch_views,
    principals,
    records,
)


class CancelStore(Protocol):
    """An operator cancels a waiting dispatch (`dispatch cancel`)."""

    async def cancel_dispatch(
        self,
        request: cancels.Cancel,
        *,
        now_ms: int,
        context: principals.RequestContext | None = None,
    ) -> records.Transition:
        """Move a `pending`/`retry_wait` row to `cancelled`, with its ledger line and audit
        record, under the claim's fence. COMPLETED, or NOT_FOUND, or CONFLICT with the status
        found (`reason` is that status, or `raced` when a claim committed in between)."""
        ...


class DispatchReadStore(Protocol):
    """What operators read about dispatches (`dispatch list|show`); it writes nothing and
    hands out no lease token. Effective statuses are decided on the earlier of `now_ms` and
    the database's clock, as `counts` decides them."""

    async def list_dispatches(
        self, request: dispatch_views.ListQuery, *, now_ms: int
    ) -> dispatch_views.Page:
        """A keyset page of dispatches, newest first (created_at_ms, then id, descending)."""
        ...

    async def show_dispatch(self, dispatch_id: str, *, now_ms: int) -> dispatch_views.Detail | None:
        """One dispatch with its plan's plain fields, execution, ledger, receipt and Run,
        recovery and StepRun, in one store call; None when there is no such dispatch."""
        ...

    async def dispatch_run_ids(self, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """The Run id of each dispatch whose Run exists (by idempotency key)."""
        ...
