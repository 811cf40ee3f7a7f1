"""Submit: create, approve and consume in one transaction, all or nothing (`submit
run-create`, `submit tool-invoke`, the Python API's `submit`).

A self-approval: where the principal may not approve its own requests the store refuses
(`SelfApprovalRefused`, or `ApprovalNotPermitted`) and nothing is written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke
from qinglong_dispatcher.domain import approvals, errors, ids, plans, traces, waits
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import steps
from qinglong_dispatcher.usecases import policy, requesting

MAX_SUBMIT_ITEMS = 10_000
"""Upper bound of one all-or-nothing bulk submit."""


async def submit(
    store: requesting.RequestStore,
    clock: ports.Clock,
    the_policy: policy.Policy,
    plan_list: Sequence[plans.AnyPlan],
    *,
    requested_by: str,
    approved_by: str,
    traceparent: str | None = None,
    narrowing: waits.Narrowing | None = None,
) -> list[approvals.Consumed]:
    """Create, approve and consume every plan in one transaction: all or nothing
    (`traceparent`, `narrowing`: as `requesting.request_approval`, for every plan)."""
    if len(plan_list) > MAX_SUBMIT_ITEMS:
        raise errors.InvalidInput(f"at most {MAX_SUBMIT_ITEMS} plans per submit")
    plans.require_identifier("approved-by", approved_by)
    first = plan_list[0] if plan_list else None
    with requesting.submit_span(
        first.ACTION_TYPE if first else "none", first.project_id if first else None, traceparent
    ) as span:
        now = clock.now_ms()
        stored = span.traceparent or traceparent
        narrowed = None if narrowing is None else narrowing.check(now_ms=now)
        items = [
            requesting.new_approval(
                p,
                requested_by=requested_by,
                now_ms=now,
                approval_ttl_ms=the_policy.approval_ttl_ms,
                plan_digests=store.plan_digests,
                traceparent=stored,
                narrowing=narrowed,
            )
            for p in plan_list
        ]
        span.set("qinglong.items", len(items))
        consumed = await store.submit(
            items, approved_by=approved_by, now_ms=now, max_attempts=the_policy.max_attempts
        )
        if len(consumed) == 1:
            span.set("qinglong.dispatch_id", consumed[0].dispatch_id)
        return consumed


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolSubmission:
    """The dispatch a tool step became, and the StepRun waiting for it."""

    consumed: approvals.Consumed
    step_run_id: str


def tool_invoke_plan(
    *, project_id: str, run_id: str, step_run_id: str, tool_id: str, content: str
) -> tool_invoke.ToolInvocationPlan:
    """An exact-shape `tool.invoke` plan for the newest reviewed version of `tool_id`."""
    definition = tool_registry.latest(tool_id) if isinstance(tool_id, str) else None
    if definition is None:
        shown = tool_id if plans.is_identifier(tool_id) else "?"
        raise errors.InvalidInput(f"tool: no reviewed built-in tool {shown}", code="tool_unknown")
    plan = plans.parse_plan(
        tool_invoke.ACTION_TYPE,
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": project_id,
            "runId": run_id,
            "stepRunId": step_run_id,
            "toolId": definition.tool_id,
            "toolVersion": definition.version,
            "content": content,
        },
        models=requesting.CORE_PLAN_MODELS,
    )
    assert isinstance(plan, tool_invoke.ToolInvocationPlan)
    return plan


async def submit_tool_invocation(
    store: ports.Store,
    steps_repository: ports.ToolStepRepository,
    clock: ports.Clock,
    the_policy: policy.Policy,
    *,
    project_id: str,
    run_id: str,
    tool_id: str,
    content: str,
    requested_by: str,
    approved_by: str,
    traceparent: str | None = None,
) -> ToolSubmission:
    """Validate everything first, then write plan, approval and StepRun, approve and consume
    in one transaction of `tool.invoke`'s repository (`steps_repository`, over `store`): all
    or nothing (a missing or finished Run writes nothing). `traceparent`: the caller's checked
    W3C context, as `submit`."""
    plans.require_identifier("requested-by", requested_by)
    plans.require_identifier("approved-by", approved_by)
    traceparent = traces.optional_traceparent(traceparent)
    step_run_id = ids.new_step_run_id()
    plan = tool_invoke_plan(
        project_id=project_id,
        run_id=run_id,
        step_run_id=step_run_id,
        tool_id=tool_id,
        content=content,
    )
    with requesting.submit_span(plan.ACTION_TYPE, plan.project_id, traceparent) as span:
        now = clock.now_ms()
        new = requesting.new_approval(
            plan,
            requested_by=requested_by,
            now_ms=now,
            approval_ttl_ms=the_policy.approval_ttl_ms,
            plan_digests=store.plan_digests,
            traceparent=span.traceparent or traceparent,
        )
        consumed = await steps_repository.submit_tool_invocation(
            new,
            _waiting_step(plan, new, step_run_id),
            approved_by=approved_by,
            now_ms=now,
            max_attempts=the_policy.max_attempts,
        )
        span.set("qinglong.dispatch_id", consumed.dispatch_id)
    return ToolSubmission(consumed=consumed, step_run_id=step_run_id)


def _waiting_step(
    plan: tool_invoke.ToolInvocationPlan, new: approvals.NewApproval, step_run_id: str
) -> steps.NewStepRun:
    """The StepRun of `plan`, waiting for its approval `new`."""
    definition = tool_registry.lookup(plan.tool_id, plan.tool_version)
    assert definition is not None
    return steps.NewStepRun(
        binding=steps.Binding(
            step_run_id=step_run_id,
            run_id=plan.run_id,
            project_id=plan.project_id,
            tool_id=definition.tool_id,
            tool_version=definition.version,
            definition_digest=definition.digest,
            action_type=plan.ACTION_TYPE,
            action_ref=plan.action_ref,
            action_digest=new.action_digest,
            approval_request_id=new.approval_request_id,
        ),
        status=steps.StepRunStatus.WAITING_APPROVAL,
    )
