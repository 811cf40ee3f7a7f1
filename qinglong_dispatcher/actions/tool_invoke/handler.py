"""The `tool.invoke` handler: the start barrier commits before the adapter runs, once
(docs/decisions/0019).

`inspect` resolves the plan and checks the StepRun waits for this very approval. `execute`
builds the start command once and calls `prepare`, retrying it (jittered backoff, within the
execute deadline) while it fails with a retryable store error: a rolled-back prepare wrote
nothing and ran nothing, so giving up is an explicit failure. Only a `created`/`existing`
barrier lets the adapter run, with the dispatch id as idempotency key; its explicit result
settles the StepRun and completes the execution in one transaction (`committed`). Anything
the adapter leaves unexplained raises: the dispatcher records it as indeterminate.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.tool_invoke import file_write, sandbox
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.actions.tool_invoke import plan as plan_model
from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import steps as step_records

log = structlog.get_logger("qinglong_dispatcher.actions.tool_invoke.handler")

ACTION_TYPE = plan_model.ACTION_TYPE
RETRY_FIRST_S = 0.02
RETRY_MAX_S = 0.5
PREPARE_SHARE = 0.6
"""Share of the execute budget `prepare` may spend retrying; the rest is for the adapter."""
SEEN_SIZE = 256
"""StepRuns `inspect` found waiting, kept for the `execute` that follows, so it reads none: the
barrier reads the StepRun again locked, and one that moved since makes the start refuse."""

T = TypeVar("T")

FaultHook = Callable[[str, records.Dispatch], Awaitable[None]]
"""Test-only seam at `after_barrier` and `after_adapter` (the file written, nothing settled
yet: the crash window evidence closes); production wiring passes none."""


class ToolInvokeHandler:
    """The `tool.invoke` action over the reviewed built-in adapters."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plan_store: ports.PlanStore,
        steps: ports.ToolSteps,
        clock: ports.Clock,
        *,
        adapter: file_write.FileWriteAdapter,
        profile: str,
        rng: random.Random | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self._plan_store = plan_store
        self._steps = steps
        self._plans = contract.PlanReader(plan_store, {ACTION_TYPE: plan_model.ToolInvocationPlan})
        self._fault_hook = fault_hook
        self._clock = clock
        self._adapter = adapter
        self._profile = profile
        self._rng = rng or random.Random()
        self._policy = tool_registry.ToolPolicy(
            sandbox_root=sandbox.policy_root(adapter.sandbox_dir)
        )
        self._seen: collections.OrderedDict[str, step_records.StepRun] = collections.OrderedDict()

    async def _resolve(
        self, dispatch: records.Dispatch
    ) -> tuple[plan_model.ToolInvocationPlan, str]:
        """The plan and its action digest (the approved one when it binds this plan: keyed, or
        plain from before the ring)."""
        plan, digest = await self._plans.resolve(dispatch, plan_model.ToolInvocationPlan)
        if len(plan.content.encode("utf-8")) > self._policy.max_content_bytes:
            raise errors.PlanInvalid("content exceeds the tool policy", code="content_too_large")
        return plan, digest

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """A page's plans in one read (`ports.PrefetchingHandler`)."""
        await self._plans.prefetch(dispatches)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """Plan, policy, sandbox and StepRun checks; writes nothing."""
        try:
            plan, digest = await self._resolve(dispatch)
        except errors.InvalidInput as exc:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=exc.code)
        if not await self._adapter.sandbox_ready():
            # Perhaps an unmounted share: retried with backoff, blocked once the budget is spent.
            return ports.InspectResult(
                kind=ports.InspectKind.TRANSIENT, code=errors.SandboxUnavailable.code
            )
        step = await self._steps.get_step_run(plan.step_run_id)
        refusal = tool_invocations.step_refusal(step, plan, dispatch)
        if refusal is not None:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=refusal)
        if step is not None:
            self._seen[dispatch.dispatch_id] = step
            if len(self._seen) > SEEN_SIZE:
                self._seen.popitem(last=False)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Barrier, adapter, then StepRun and execution settled together."""
        dispatch = ctx.dispatch
        budget_s = max(0.0, (ctx.deadline_ms - self._clock.now_ms()) / 1000)
        started = anyio.current_time()
        end = started + budget_s
        failed = states.Completion.FAILED
        try:
            plan, digest = await self._resolve(dispatch)
        except errors.InvalidInput as exc:
            return await self._finish(ctx, None, failed, exc.code, end)
        if digest != dispatch.action_digest:
            return await self._finish(ctx, plan, failed, "digest_drift", end)
        step = self._seen.pop(dispatch.dispatch_id, None)
        if step is None or step.step_run_id != plan.step_run_id:
            step = await self._steps.get_step_run(plan.step_run_id)
        refusal = tool_invocations.step_refusal(step, plan, dispatch)
        if refusal is not None or step is None:
            return await self._finish(ctx, plan, failed, refusal or "step_run_missing", end)
        command = tool_invocations.build_command(
            ids=tool_invocations.ids_for(dispatch.dispatch_id),
            plan=plan,
            step=step,
            policy=self._policy,
            profile=self._profile,
            actor=dispatch.approved_by,
            dispatch=dispatch,
            plan_digests=self._plan_store.plan_digests,
        )
        try:
            barrier = await self._retrying(
                lambda: self._steps.prepare(command),
                ctx,
                give_up_at=started + budget_s * PREPARE_SHARE,
                what="prepare",
            )
        except errors.StoreError as exc:
            # Every prepare rolled back whole (or replays as `existing` if one did commit
            # unacknowledged — the adapter has not run either way): an explicit failure.
            log.warning("tool.start_gave_up", dispatch_id=dispatch.dispatch_id, code=exc.code)
            return await self._finish(ctx, plan, failed, "start_unavailable", end)
        if barrier.outcome is ports.StartOutcome.CONFLICT:
            log.warning(
                "tool.start_refused", dispatch_id=dispatch.dispatch_id, reason=barrier.reason
            )
            code = f"start_{barrier.reason or 'conflict'}"[:128]
            return await self._finish(ctx, plan, failed, code, end)
        log.info(
            "tool.started",
            dispatch_id=dispatch.dispatch_id,
            step_run_id=plan.step_run_id,
            start_id=command.start_id,
            outcome=barrier.outcome.value,
        )
        await self._fault("after_barrier", dispatch)
        try:
            result = await self._adapter.write(
                project_id=plan.project_id,
                dispatch_id=ctx.idempotency_key,
                content=plan.content.encode("utf-8"),
            )
        except Exception as exc:  # after the barrier an unexplained failure is indeterminate
            # Settle here, in one transaction: the execution `blocked` and its StepRun `lost`
            # (never left `running`), instead of leaving the step to nobody.
            code = exc.code if isinstance(exc, errors.QinglongError) else "adapter_raised"
            log.warning("tool.adapter_raised", dispatch_id=dispatch.dispatch_id, code=code)
            blocked = states.Completion.BLOCKED
            return await self._finish(ctx, plan, blocked, f"indeterminate:{code}"[:128], end)
        await self._fault("after_adapter", dispatch)
        completion = states.Completion.SUCCEEDED if result.succeeded else states.Completion.FAILED
        return await self._finish(ctx, plan, completion, result.code.value, end)

    async def _fault(self, point: str, dispatch: records.Dispatch) -> None:
        if self._fault_hook is not None:
            await self._fault_hook(point, dispatch)

    async def _finish(
        self,
        ctx: ports.ExecutionContext,
        plan: plan_model.ToolInvocationPlan | None,
        completion: states.Completion,
        code: str,
        give_up_at: float,
    ) -> ports.ExecuteResult:
        """StepRun result and execution completion in one transaction, retried while it may."""
        request = ports.ToolStepCompletion(
            dispatch=ctx.dispatch,
            identity=ctx.identity,
            step_run_id=plan.step_run_id if plan is not None else None,
            completion=completion,
            result_code=code,
            now_ms=self._clock.now_ms(),
        )
        done = await self._retrying(
            lambda: self._steps.complete_tool_step(request),
            ctx,
            give_up_at=give_up_at,
            what="finish",
        )
        if done.outcome is ports.ToolStepOutcome.FENCED:
            raise errors.LeaseConflict(f"execution fenced: {done.reason}")
        log.info(
            "tool.finished",
            dispatch_id=ctx.dispatch.dispatch_id,
            completion=completion.value,
            code=code,
            step_status=done.step_status.value if done.step_status else None,
        )
        return ports.ExecuteResult(
            kind=ports.ExecuteKind.COMMITTED, code=code, committed_as=completion
        )

    async def _retrying(
        self,
        operation: Callable[[], Awaitable[T]],
        ctx: ports.ExecutionContext,
        *,
        give_up_at: float,
        what: str,
    ) -> T:
        """Run a whole-transaction store operation, retrying retryable failures until the
        deadline (the injected clock's, and the real-time share given by `give_up_at`)."""
        delay = RETRY_FIRST_S
        while True:
            try:
                return await operation()
            except errors.StoreError as exc:
                pause = delay * self._rng.uniform(0.5, 1.5)
                late = (
                    self._clock.now_ms() + pause * 1000 >= ctx.deadline_ms
                    or anyio.current_time() + pause >= give_up_at
                )
                if not exc.retryable or late:
                    raise
                log.info(
                    "tool.store_retry",
                    dispatch_id=ctx.dispatch.dispatch_id,
                    operation=what,
                    code=exc.code,
                )
                await anyio.sleep(pause)
                delay = min(RETRY_MAX_S, delay * 2)
