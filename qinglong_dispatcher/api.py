"""The Python API a control plane embeds: create, approve and consume approvals, submit a tool
step, settle or cancel a dispatch; read status."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import (
    approvals,
    cancels,
    canonical,
    digests,
    errors,
    fencing,
    ids,
    plans,
    principals,
    records,
    recovery,
    states,
)
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import steps

MAX_SUBMIT_ITEMS = 10_000
"""Upper bound of one all-or-nothing bulk submit."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """What the API needs from the settings."""

    approval_ttl_ms: int
    max_attempts: int


def run_create_plan(fields: Mapping[str, object]) -> plans.ApprovedRunCreationPlan:
    """Validate a run.create plan object, filling `schemaVersion` and a fresh `actionRef`."""
    data = {"schemaVersion": 1, "actionRef": ids.new_action_ref(), "executorType": "shell"}
    data.update({"priority": 0})
    data.update(fields)
    plan = plans.parse_plan("run.create", data)
    assert isinstance(plan, plans.ApprovedRunCreationPlan)
    return plan


def new_approval(
    plan: plans.AnyPlan,
    *,
    requested_by: str,
    now_ms: int,
    approval_ttl_ms: int,
    plan_digests: digests.PlanDigests,
) -> approvals.NewApproval:
    """The pending approval request for a validated plan: its canonical bytes and digests
    (`plan_digests`: the store's, keyed where plans are sealed)."""
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
    )


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

    def _plan_models(self, action_type: str) -> plans.PlanModels | None:
        if action_type in plans.PLAN_MODELS or self._installed_plan_models is None:
            return None
        return self._installed_plan_models()

    def _new_approval(
        self, plan: plans.AnyPlan, *, requested_by: str, now_ms: int
    ) -> approvals.NewApproval:
        return new_approval(
            plan,
            requested_by=requested_by,
            now_ms=now_ms,
            approval_ttl_ms=self._policy.approval_ttl_ms,
            plan_digests=self._store.plan_digests,
        )

    async def create_approval(
        self, action_type: str, plan_data: Mapping[str, object] | bytes, *, requested_by: str
    ) -> approvals.Approval:
        """Validate the exact-shape plan and create a pending approval request for it."""
        plan = plans.parse_plan(action_type, plan_data, models=self._plan_models(action_type))
        now = self._clock.now_ms()
        new = self._new_approval(plan, requested_by=requested_by, now_ms=now)
        return await self._store.create_approval(new, now_ms=now)

    async def approve(self, approval_request_id: str, *, decided_by: str) -> approvals.Approval:
        """Approve a pending request."""
        plans.require_identifier("approved-by", decided_by)
        return await self._store.approve(
            approval_request_id, decided_by=decided_by, now_ms=self._clock.now_ms()
        )

    async def approve_many(
        self, ids: Sequence[str], *, decided_by: str
    ) -> list[approvals.Approval]:
        """Approve every request, in one transaction: all or nothing (the first refusal is
        raised, naming its request)."""
        plans.require_identifier("approved-by", decided_by)
        return await self._store.approve_many(
            ids, decided_by=decided_by, now_ms=self._clock.now_ms()
        )

    async def reject(self, approval_request_id: str, *, decided_by: str) -> approvals.Approval:
        """Reject (cancel) a pending request: it can never be approved or consumed."""
        plans.require_identifier("by", decided_by)
        return await self._store.reject(
            approval_request_id, decided_by=decided_by, now_ms=self._clock.now_ms()
        )

    async def consume(self, approval_request_id: str) -> approvals.Consumed:
        """Consume an approved request into an immutable dispatch and its execution."""
        return await self._store.consume(
            approval_request_id,
            now_ms=self._clock.now_ms(),
            max_attempts=self._policy.max_attempts,
        )

    async def submit(
        self,
        plan_list: Sequence[plans.AnyPlan],
        *,
        requested_by: str,
        approved_by: str,
    ) -> list[approvals.Consumed]:
        """Create, approve and consume every plan in one transaction: all or nothing.

        A self-approval: where the principal may not approve its own requests the store
        refuses (`SelfApprovalRefused`, or `ApprovalNotPermitted`) and nothing is written.
        """
        if len(plan_list) > MAX_SUBMIT_ITEMS:
            raise errors.InvalidInput(f"at most {MAX_SUBMIT_ITEMS} plans per submit")
        plans.require_identifier("approved-by", approved_by)
        now = self._clock.now_ms()
        items = [self._new_approval(p, requested_by=requested_by, now_ms=now) for p in plan_list]
        return await self._store.submit(
            items, approved_by=approved_by, now_ms=now, max_attempts=self._policy.max_attempts
        )

    async def status(self) -> records.StatusCounts:
        """Counts per effective status, due backlog and Runs."""
        return await self._store.counts(now_ms=self._clock.now_ms())


async def resolve_manually(
    store: ports.Store,
    clock: ports.Clock,
    dispatch_id: str,
    *,
    resolution: states.Completion,
    operator: str,
    reason: str,
    acting: ports.RecoveryStore | None = None,
    context: principals.RequestContext | None = None,
) -> records.Transition:
    """An operator settles one recovery_required execution (audited, fenced, one transaction).

    The API reads through `store` and writes through `acting` (the store acting as the token's
    principal), passing its request's `context` for the audit row."""
    plans.require_identifier("operator", operator)
    plans.require_identifier("reason", reason)
    now = clock.now_ms()
    execution = await store.get_execution(dispatch_id)
    if execution is None:
        raise errors.RecoveryRefused(f"dispatch {dispatch_id} not found")
    # The store decides on both clocks again inside its transaction; this only words the refusal.
    settling = recovery.settling_now_ms(now, await store.database_now_ms())
    effective = execution.effective_status(settling)
    if effective is not states.EffectiveStatus.RECOVERY_REQUIRED:
        by_clock = " by the database clock" if execution.effective_status(now) != effective else ""
        raise errors.RecoveryRefused(
            f"dispatch {dispatch_id} is {effective.value}{by_clock}, not recovery_required"
        )
    done = await (store if acting is None else acting).resolve_recovery(
        recovery.Resolution(
            fence=fencing.identity_of(execution),
            project_id=execution.project_id,
            resolution=resolution,
            source=recovery.Source.MANUAL,
            evidence_digest=None,
            resolved_by=operator,
            reason_code=reason,
        ),
        now_ms=now,
        context=context,
    )
    if done.outcome is not records.Outcome.COMPLETED:
        raise errors.RecoveryRefused(
            f"dispatch {dispatch_id} changed while resolving ({done.reason})"
        )
    return done


async def cancel_dispatch(
    store: ports.CancelStore,
    clock: ports.Clock,
    dispatch_id: str,
    *,
    operator: str,
    reason: str,
    context: principals.RequestContext | None = None,
) -> records.Transition:
    """An operator cancels a `pending` or `retry_wait` dispatch (audited, fenced, one
    transaction); any other state, or a claim that commits first, is `CancelRefused`."""
    plans.require_identifier("operator", operator)
    plans.require_identifier("reason", reason)
    request = cancels.Cancel(dispatch_id=dispatch_id, operator=operator, reason_code=reason)
    try:
        done = await store.cancel_dispatch(request, now_ms=clock.now_ms(), context=context)
    except errors.TransitionRefused as exc:
        if exc.rule != "operator":
            raise
        raise errors.CancelRefused(
            f"dispatch {dispatch_id} was not cancelled: cancelling needs an operator login "
            "(a member of the installation's _operator role)"
        ) from exc
    if done.outcome is records.Outcome.NOT_FOUND:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    if done.outcome is not records.Outcome.COMPLETED:
        now = "was claimed while cancelling" if done.reason == "raced" else f"is {done.reason}"
        raise errors.CancelRefused(
            f"dispatch {dispatch_id} {now}: only pending or retry_wait can be cancelled"
        )
    return done


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
    steps_repository: ports.ToolStepRepository,
    clock: ports.Clock,
    policy: Policy,
    *,
    project_id: str,
    run_id: str,
    tool_id: str,
    content: str,
    requested_by: str,
    approved_by: str,
) -> ToolSubmission:
    """Validate everything first, then write plan, approval and StepRun, approve and consume
    in one transaction of `tool.invoke`'s repository (`steps_repository`, over `store`): all
    or nothing (a missing or finished Run writes nothing)."""
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
    new = new_approval(
        plan,
        requested_by=requested_by,
        now_ms=now,
        approval_ttl_ms=policy.approval_ttl_ms,
        plan_digests=store.plan_digests,
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
    consumed = await steps_repository.submit_tool_invocation(
        new, step, approved_by=approved_by, now_ms=now, max_attempts=policy.max_attempts
    )
    return ToolSubmission(consumed=consumed, step_run_id=step_run_id)
