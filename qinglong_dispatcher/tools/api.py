"""Submitting a tool step (API and CLI): plan, waiting StepRun, approve and consume at once."""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import approvals, canonical, digests, errors, ids, plans
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import steps


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolSubmission:
    """The dispatch a tool step became, and the StepRun waiting for it."""

    consumed: approvals.Consumed
    step_run_id: str


def tool_invoke_plan(
    *, project_id: str, run_id: str, step_run_id: str, tool_id: str, content: str
) -> plans.ToolInvocationPlan:
    """An exact-shape `tool.invoke` plan for the newest reviewed version of `tool_id`."""
    definition = tool_registry.latest(tool_id) if isinstance(tool_id, str) else None
    if definition is None:
        shown = tool_id if plans.is_identifier(tool_id) else "?"
        raise errors.InvalidInput(f"tool: no reviewed built-in tool {shown}", code="tool_unknown")
    plan = plans.parse_plan(
        "tool.invoke",
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
    )
    assert isinstance(plan, plans.ToolInvocationPlan)
    return plan


async def submit_tool_invocation(
    store: ports.Store,
    clock: ports.Clock,
    policy: api.Policy,
    *,
    project_id: str,
    run_id: str,
    tool_id: str,
    content: str,
    requested_by: str,
    approved_by: str,
) -> ToolSubmission:
    """Validate everything first, then write plan, approval and StepRun, approve and consume
    in one transaction: all or nothing (a missing or finished Run writes nothing)."""
    plans.require_identifier("requested-by", requested_by)
    plans.require_identifier("approved-by", approved_by)
    step_run_id = ids.new_step_run_id()
    plan = tool_invoke_plan(
        project_id=project_id,
        run_id=run_id,
        step_run_id=step_run_id,
        tool_id=tool_id,
        content=content,
    )
    definition = tool_registry.lookup(plan.tool_id, plan.tool_version)
    assert definition is not None
    now = clock.now_ms()
    plan_dict = plan.to_canonical_dict()
    new = approvals.NewApproval(
        approval_request_id=ids.new_approval_request_id(now),
        project_id=plan.project_id,
        action_type=plan.ACTION_TYPE,
        action_ref=plan.action_ref,
        plan_json=canonical.dumps(plan_dict).decode("utf-8"),
        plan_digest=digests.plan_digest(plan_dict),
        action_digest=plans.plan_action_digest(plan),
        requested_by=requested_by,
        expires_at_ms=now + policy.approval_ttl_ms,
    )
    step = steps.NewStepRun(
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
    consumed = await store.submit_tool_invocation(
        new, step, approved_by=approved_by, now_ms=now, max_attempts=policy.max_attempts
    )
    return ToolSubmission(consumed=consumed, step_run_id=step_run_id)
