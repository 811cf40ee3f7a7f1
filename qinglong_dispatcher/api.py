"""The Python API a control plane embeds: create, approve and consume approvals, submit a tool
step, settle or cancel a dispatch; read status.

A facade over the application services (`usecases`), which the CLI and the web layer call
too: each operation here is written there once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import approvals, errors, plans, records, traces, waits
from qinglong_dispatcher.usecases import (
    approving,
    consuming,
    rejecting,
    requesting,
    submitting,
)
from qinglong_dispatcher.usecases.cancelling import cancel_dispatch
from qinglong_dispatcher.usecases.policy import Policy
from qinglong_dispatcher.usecases.requesting import new_approval, run_create_plan
from qinglong_dispatcher.usecases.resolving import resolve_manually
from qinglong_dispatcher.usecases.submitting import (
    MAX_SUBMIT_ITEMS,
    ToolSubmission,
    submit_tool_invocation,
    tool_invoke_plan,
)

__all__ = [
    "MAX_SUBMIT_ITEMS",
    "Api",
    "Policy",
    "ToolSubmission",
    "cancel_dispatch",
    "new_approval",
    "resolve_manually",
    "run_create_plan",
    "submit_tool_invocation",
    "tool_invoke_plan",
]


class Api:
    """Approval and status operations over one store."""

    def __init__(
        self,
        store: ports.Store,
        clock: ports.Clock,
        policy: Policy,
        *,
        installed_plan_models: Callable[[], plans.PlanModels] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._policy = policy
        # Called only for a type that is not built in: most commands never load entry points.
        self._installed_plan_models = installed_plan_models

    async def create_approval(
        self,
        action_type: str,
        plan_data: Mapping[str, object] | bytes,
        *,
        requested_by: str,
        not_before_ms: int | None = None,
        window_for_ms: int | None = None,
    ) -> approvals.Approval:
        """Validate the exact-shape plan and create a pending approval request for it, its
        window narrowed to start no earlier than `not_before_ms` (epoch milliseconds) and
        within `window_for_ms` of it (`WindowEmpty` if that can never open)."""
        plan = requesting.parse_plan(action_type, plan_data, installed=self._installed_plan_models)
        return await requesting.request_approval(
            self._store,
            self._clock,
            self._policy,
            plan,
            requested_by=requested_by,
            narrowing=_narrowing(not_before_ms, window_for_ms),
        )

    async def approve(self, approval_request_id: str, *, decided_by: str) -> approvals.Approval:
        """Approve a pending request."""
        return await approving.approve(
            self._store, self._clock, approval_request_id, decided_by=decided_by
        )

    async def approve_many(
        self, ids: Sequence[str], *, decided_by: str
    ) -> list[approvals.Approval]:
        """Approve every request, in one transaction: all or nothing (the first refusal is
        raised, naming its request)."""
        return await approving.approve_many(self._store, self._clock, ids, decided_by=decided_by)

    async def reject(self, approval_request_id: str, *, decided_by: str) -> approvals.Approval:
        """Reject (cancel) a pending request: it can never be approved or consumed."""
        return await rejecting.reject(
            self._store, self._clock, approval_request_id, decided_by=decided_by
        )

    async def consume(self, approval_request_id: str) -> approvals.Consumed:
        """Consume an approved request into an immutable dispatch and its execution."""
        return await consuming.consume(self._store, self._clock, self._policy, approval_request_id)

    async def submit(
        self,
        plan_list: Sequence[plans.AnyPlan],
        *,
        requested_by: str,
        approved_by: str,
        traceparent: str | None = None,
        not_before_ms: int | None = None,
        window_for_ms: int | None = None,
    ) -> list[approvals.Consumed]:
        """Create, approve and consume every plan in one transaction: all or nothing.

        A self-approval: where the principal may not approve its own requests the store
        refuses (`SelfApprovalRefused`, or `ApprovalNotPermitted`) and nothing is written.
        `traceparent` (W3C, checked: `InvalidTraceparent`) names the trace they join;
        `not_before_ms` and `window_for_ms` narrow their window, as `create_approval`.
        """
        return await submitting.submit(
            self._store,
            self._clock,
            self._policy,
            plan_list,
            requested_by=requested_by,
            approved_by=approved_by,
            traceparent=traces.optional_traceparent(traceparent),
            narrowing=_narrowing(not_before_ms, window_for_ms),
        )

    async def status(self) -> records.StatusCounts:
        """Counts per effective status, due backlog and Runs."""
        return await self._store.counts(now_ms=self._clock.now_ms())


def _narrowing(not_before_ms: int | None, window_for_ms: int | None) -> waits.Narrowing | None:
    """The caller's narrowing of the window; None if it names none. Its bounds are the
    database's (a positive moment; a span of 1 second to 30 days)."""
    if not_before_ms is None and window_for_ms is None:
        return None
    if window_for_ms is not None and not 1_000 <= window_for_ms <= 2_592_000_000:
        raise errors.InvalidInput("window_for_ms: between 1 second and 30 days")
    if not_before_ms is not None and not_before_ms <= 0:
        raise errors.InvalidInput("not_before_ms: a moment in epoch milliseconds")
    return waits.Narrowing(not_before_ms=not_before_ms, window_for_ms=window_for_ms)
