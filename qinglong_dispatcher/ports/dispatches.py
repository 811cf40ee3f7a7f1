"""What operators read and decide about dispatches: list, show, cancel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from qinglong_dispatcher.domain import (
    activity,
    approval_views,
    cancels,
    dispatch_views,
    plan_previews,
    principals,
    records,
)
from qinglong_dispatcher.ports.approvals import StoredPlan


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

    async def show_dispatch(
        self,
        dispatch_id: str,
        *,
        now_ms: int,
        shown: plan_previews.ShownFields = plan_previews.IDENTITY_ONLY,
    ) -> dispatch_views.Detail | None:
        """One dispatch with its plan's redacted preview (`shown`: the members shown as they
        are, per action type; by default only every plan's identity), execution, ledger,
        receipt and Run, recovery and StepRun, in one store call; None when there is no such
        dispatch."""
        ...

    async def requested_again(self, source_id: str) -> tuple[str, ...]:
        """The requests made again from `source_id` (a dispatch, or an expired request),
        oldest first (decision 0048)."""
        ...

    async def dispatch_run_ids(self, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """The Run id of each dispatch that created a Run (its action's tables say which:
        `run.create`'s by idempotency key), in one snapshot."""
        ...

    async def recent_activity(
        self, *, requested_since_ms: int, settled_since_ms: int, limit: int
    ) -> activity.Activity:
        """New approval requests and settled dispatches (for the event stream), each at or
        after its own time, oldest first, at most `limit` of each."""
        ...


class PlanReadStore(Protocol):
    """What approvers and plan readers read about plans (`approval list`, `dispatch show
    --plan`)."""

    async def list_waiting_approvals(
        self,
        request: approval_views.ListQuery,
        *,
        now_ms: int,
        shown: plan_previews.ShownFields,
    ) -> approval_views.Page:
        """A keyset page of the pending, unexpired requests, newest first, each with its
        plan's redacted preview; it writes nothing."""
        ...

    async def read_full_plan(self, dispatch_id: str) -> StoredPlan | None:
        """A dispatch's whole plan, opened (or marked unreadable), and its `plan.read` audit
        row in the same transaction; None, with nothing written, for an unknown dispatch.
        On PostgreSQL only a plan reader's login may (`errors.PlanReadRefused` otherwise)."""
        ...
