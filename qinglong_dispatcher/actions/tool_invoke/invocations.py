"""How a `tool.invoke` dispatch becomes a start command: derived identities and bindings.

Every identity of a start (start id, mutation, trace, receipt) is derived from the dispatch
id, so the same execute building the command twice builds the same bytes: a retry after an
unacknowledged commit is an exact replay (`existing`), never a second start.
"""

from __future__ import annotations

import dataclasses
import hashlib

from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke_plan
from qinglong_dispatcher.domain import digests, errors, plans, records
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StartIds:
    """The identities one start writes."""

    start_id: str
    mutation_id: str
    trace_id: str
    audit_receipt_id: str


def ids_for(key: str) -> StartIds:
    """Identities derived from `key` (the dispatch id for the dispatched path)."""
    plans.require_identifier("start key", key)
    if len(key) > 100:
        raise errors.InvalidInput("start key: at most 100 characters")
    trace = hashlib.sha256(b"qinglong/trace-id@v1\0" + key.encode("utf-8")).hexdigest()[:32]
    return StartIds(
        start_id=f"ts-{key}",
        mutation_id=f"{key}:step-start",
        trace_id=f"tr-{trace}",
        audit_receipt_id=f"{key}:audit-receipt",
    )


def finish_mutation_id(dispatch_id: str) -> str:
    """The ledger id of the mutation that settles a dispatch's StepRun."""
    return f"{dispatch_id}:step-finish"


def audit_detail(definition: tool_registry.ToolDefinition) -> str:
    """The audit event's low-sensitivity detail code: `toolId:vN`."""
    return f"{definition.tool_id}:v{definition.version}"


def build_command(
    *,
    ids: StartIds,
    plan: tool_invoke_plan.ToolInvocationPlan,
    step: steps.StepRun,
    policy: tool_registry.ToolPolicy,
    profile: str,
    actor: str,
    dispatch: records.Dispatch | None,
    plan_digests: digests.PlanDigests,
) -> tool_start.StartCommand:
    """The start command of `step` at its current version, under `dispatch` when approved.

    `plan_digests` are the store's (keyed where plans are sealed); a dispatch's plan carries
    the digest its approval bound, plain when it was approved before the key ring.
    Raises `InvalidInput` when the plan names no reviewed tool or the pieces do not fit
    together (the model re-checks every binding against the registry).
    """
    definition = tool_registry.lookup(plan.tool_id, plan.tool_version)
    if definition is None:
        raise errors.InvalidInput("plan names no reviewed built-in tool", code="tool_unknown")
    if dispatch is None:
        action_digest = plans.plan_action_digest(plan, plan_digests)
    else:
        canonical_plan = plans.plan_canonical(plan)
        action_digest = plan_digests.bound(plan.ACTION_TYPE, canonical_plan, dispatch.action_digest)
    plan_digest = plan_digests.plan_digest(plan.to_canonical_dict())
    approval = None
    if dispatch is not None:
        approval = {
            "approvalRequestId": dispatch.approval_request_id,
            "dispatchId": dispatch.dispatch_id,
            "actionDigest": dispatch.action_digest,
        }
    return tool_start.parse_command(
        {
            "schema": tool_start.COMMAND_SCHEMA,
            "startId": ids.start_id,
            "projectId": plan.project_id,
            "snapshotDigest": tool_registry.snapshot_digest(),
            "tool": {
                "toolId": definition.tool_id,
                "toolVersion": definition.version,
                "definitionDigest": definition.digest,
                "handlerBinding": definition.handler_binding,
            },
            "action": {
                "actionType": tool_start.TOOL_INVOKE,
                "actionRef": plan.action_ref,
                "actionDigest": action_digest,
                "planDigest": plan_digest,
            },
            "admission": {
                "admissionDigest": tool_start.admission_digest(
                    action_digest=action_digest,
                    plan_digest=plan_digest,
                    profile=profile,
                    execution_class=definition.execution_class,
                    timeout_ms=definition.timeout_ms,
                ),
                "profile": profile,
                "executionClass": definition.execution_class,
                "timeoutMs": definition.timeout_ms,
            },
            "policyFence": policy.fence,
            "adapter": {
                "contractId": definition.adapter.contract_id,
                "digest": definition.adapter.digest,
            },
            "redaction": {
                "contractId": definition.redaction.contract_id,
                "digest": definition.redaction.digest,
            },
            "auditContract": {
                "contractId": definition.audit.contract_id,
                "digest": definition.audit.digest,
            },
            "approval": approval,
            "stepRun": {
                "runId": step.binding.run_id,
                "stepRunId": step.step_run_id,
                "expectedStatus": step.status.value,
                "expectedVersion": step.version,
                "startedVersion": step.version + 1,
            },
            "evidence": {
                "traceId": ids.trace_id,
                "auditKind": tool_registry.AUDIT_KIND_TOOL_START,
                "auditActor": actor,
                "auditDetail": audit_detail(definition),
                "auditReceiptId": ids.audit_receipt_id,
            },
            "mutation": {
                "mutationId": ids.mutation_id,
                "toStatus": steps.StepRunStatus.RUNNING.value,
                "runEventType": steps.EVENT_STARTED,
            },
        }
    )


def step_refusal(
    step: steps.StepRun | None,
    plan: tool_invoke_plan.ToolInvocationPlan,
    dispatch: records.Dispatch,
) -> str | None:
    """Why `step` is not this dispatch's StepRun waiting for this very approval, or None."""
    if step is None:
        return "step_run_missing"
    binding = step.binding
    if step.status is not steps.StepRunStatus.WAITING_APPROVAL:
        return "step_run_not_waiting"
    if binding.approval_request_id != dispatch.approval_request_id:
        return "step_run_approval_mismatch"
    definition = tool_registry.lookup(plan.tool_id, plan.tool_version)
    expected = (
        plan.run_id,
        plan.project_id,
        plan.tool_id,
        plan.tool_version,
        definition.digest if definition else None,
        tool_start.TOOL_INVOKE,
        plan.action_ref,
        dispatch.action_digest,
    )
    found = (
        binding.run_id,
        binding.project_id,
        binding.tool_id,
        binding.tool_version,
        binding.definition_digest,
        binding.action_type,
        binding.action_ref,
        binding.action_digest,
    )
    return None if found == expected else "step_run_binding_mismatch"
