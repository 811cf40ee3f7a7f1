"""Request an approval: a validated plan becomes a pending approval request (`approval create`,
`POST /api/v1/dispatches`, the operator UI's form)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final, Protocol

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.actions.run_create import plan as run_create
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke
from qinglong_dispatcher.domain import (
    approvals,
    canonical,
    digests,
    ids,
    plans,
    principals,
    waits,
)
from qinglong_dispatcher.usecases import policy

CORE_PLAN_MODELS: Final[plans.PlanModels] = MappingProxyType(
    {
        run_create.ACTION_TYPE: run_create.RunCreatePlan,
        tool_invoke.ACTION_TYPE: tool_invoke.ToolInvocationPlan,
    }
)
"""`run.create`'s and `tool.invoke`'s plan models: a request parses them without loading any
entry point (every other type's model comes from `installed`)."""


class RequestStore(ports.ApprovalStore, ports.PlanStore, Protocol):
    """Where a request is written, and how its plan is digested there."""


def parse_plan(
    action_type: str,
    data: Mapping[str, object] | bytes,
    *,
    installed: Callable[[], plans.PlanModels] | None = None,
) -> plans.AnyPlan:
    """The exact-shape plan of `action_type`; `installed` (the entry points' plan models) is
    called only for a type that is not built in: most callers never load entry points."""
    models = CORE_PLAN_MODELS
    if action_type not in CORE_PLAN_MODELS and installed is not None:
        models = installed()
    return plans.parse_plan(action_type, data, models=models)


def run_create_plan(fields: Mapping[str, object]) -> run_create.RunCreatePlan:
    """Validate a run.create plan object, filling `schemaVersion` and a fresh `actionRef`."""
    data = {"schemaVersion": 1, "actionRef": ids.new_action_ref(), "executorType": "shell"}
    data.update({"priority": 0})
    data.update(fields)
    plan = plans.parse_plan(run_create.ACTION_TYPE, data, models=CORE_PLAN_MODELS)
    assert isinstance(plan, run_create.RunCreatePlan)
    return plan


def new_approval(
    plan: plans.AnyPlan,
    *,
    requested_by: str,
    now_ms: int,
    approval_ttl_ms: int,
    plan_digests: digests.PlanDigests,
    traceparent: str | None = None,
    resubmitted_from: str | None = None,
    narrowing: waits.Narrowing | None = None,
) -> approvals.NewApproval:
    """The pending approval request for a validated plan: its canonical bytes and digests
    (`plan_digests`: the store's, keyed where plans are sealed; `resubmitted_from`: what it is
    requested again from), and the requester's `narrowing` of its window."""
    plans.require_identifier("requested-by", requested_by)
    plan_dict = plan.to_canonical_dict()
    return approvals.NewApproval(
        approval_request_id=ids.new_approval_request_id(now_ms),
        project_id=plan.project_id,
        action_type=plan.ACTION_TYPE,
        action_ref=plan.action_ref,
        plan_json=canonical.dumps(plan_dict).decode("utf-8"),
        plan_digest=plan_digests.plan_digest(plan_dict),
        action_digest=plans.plan_action_digest(plan, plan_digests),
        requested_by=requested_by,
        expires_at_ms=now_ms + approval_ttl_ms,
        target=plans.plan_target(plan),
        traceparent=traceparent,
        resubmitted_from=resubmitted_from,
        not_before_ms=None if narrowing is None else narrowing.not_before_ms,
        window_for_ms=None if narrowing is None else narrowing.window_for_ms,
    )


async def request_approval(
    store: RequestStore,
    clock: ports.Clock,
    the_policy: policy.Policy,
    plan: plans.AnyPlan,
    *,
    requested_by: str,
    context: principals.RequestContext | None = None,
    traceparent: str | None = None,
    resubmitted_from: str | None = None,
    narrowing: waits.Narrowing | None = None,
) -> approvals.Approval:
    """Write the plan and its pending request, expiring after the policy's TTL (`context`: an
    API request's, for its audit row; `traceparent`: the caller's checked W3C context, stored
    with the request, or with tracing on its `approval.submit` span's, a child of it;
    `narrowing`: the requester's narrowing of the window, checked again on this clock)."""
    with submit_span(plan.ACTION_TYPE, plan.project_id, traceparent) as span:
        now = clock.now_ms()
        new = new_approval(
            plan,
            requested_by=requested_by,
            now_ms=now,
            approval_ttl_ms=the_policy.approval_ttl_ms,
            plan_digests=store.plan_digests,
            traceparent=span.traceparent or traceparent,
            resubmitted_from=resubmitted_from,
            narrowing=None if narrowing is None else narrowing.check(now_ms=now),
        )
        span.set("qinglong.approval_request_id", new.approval_request_id)
        span.set("qinglong.target", new.target)
        return await store.create_approval(new, now_ms=now, context=context)


def submit_span(
    action_type: str, project_id: str | None, traceparent: str | None
) -> contextlib.AbstractContextManager[ports.Span]:
    """The `approval.submit` span: a child of the caller's trace, or a new one."""
    return tracing.current().span(
        "approval.submit",
        parent=traceparent,
        new_trace=traceparent is None,
        attributes={"qinglong.action_type": action_type, "qinglong.project_id": project_id},
    )
