"""`run.create` (docs/actions.md): inspect resolves the immutable plan; execute creates the Run.

The effect, its receipt and the completion commit in one transaction, so `execute` returns
`committed`. A rolled-back effect produced nothing and re-entry replays from the receipt, so a
lost connection or a busy store is retried by the same execute while its deadline holds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.run_create import plan as plan_model
from qinglong_dispatcher.actions.run_create import tables
from qinglong_dispatcher.domain import errors, fencing, ids, records, runs

log = structlog.get_logger("qinglong_dispatcher.actions.run_create.handler")

ACTION_TYPE = plan_model.ACTION_TYPE

FaultHook = Callable[[str, records.Dispatch], Awaitable[None]]
"""Test-only seam (`before_effect`); production wiring passes none."""
EFFECT_RETRY_FIRST_S = 0.02
EFFECT_RETRY_MAX_S = 0.5


def build_run(
    plan: plan_model.RunCreatePlan,
    dispatch: records.Dispatch,
    *,
    run_id: str,
    started_at_ms: int,
    now_ms: int,
) -> runs.Run:
    """The queued Run a plan asks for, bound to its dispatch and start time."""
    return runs.Run(
        run_id=run_id,
        project_id=plan.project_id,
        task_id=plan.task_id,
        task_revision=plan.task_revision,
        executor_type=plan.executor_type,
        priority=plan.priority,
        task_name=plan.task_name,
        task_snapshot_ref=plan.task_snapshot_ref,
        input_ref=plan.input_ref,
        status=runs.RunStatus.QUEUED,
        trigger_type=runs.TRIGGER_TYPE,
        execution_origin=runs.EXECUTION_ORIGIN,
        execution_owner=runs.EXECUTION_OWNER,
        request_id=dispatch.approval_request_id,
        idempotency_key=dispatch.dispatch_id,
        accepted_at_ms=started_at_ms,
        version=1,
        event_seq=1,
        created_at_ms=now_ms,
    )


class RunCreateHandler:
    """The `run.create` action (a `ports.PassingHandler`)."""

    action_type = ACTION_TYPE
    page_effects: ports.PageEffects = tables.TABLES
    """A page's Runs and receipts, written in the page transaction."""

    def __init__(
        self,
        plan_store: ports.PlanStore,
        repository: ports.RunCreateRepository,
        clock: ports.Clock,
        *,
        fault_hook: FaultHook | None = None,
    ) -> None:
        # The reader keeps what it resolved: inspect, the page's Run and execute share one
        # resolution of the immutable plan.
        self._plans = contract.PlanReader(plan_store, {ACTION_TYPE: plan_model.RunCreatePlan})
        self._repository = repository
        self._clock = clock
        self._fault_hook = fault_hook

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """Read and parse a page's plans in one go, so each inspect finds its plan here."""
        await self._plans.prefetch(dispatches)

    async def _resolve(self, dispatch: records.Dispatch) -> tuple[plan_model.RunCreatePlan, str]:
        return await self._plans.resolve(dispatch, plan_model.RunCreatePlan)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """Parse the immutable plan and return its action digest; writes nothing."""
        try:
            _, digest = await self._resolve(dispatch)
        except errors.InvalidInput as exc:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=exc.code)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    def page_effect(self, dispatch: records.Dispatch, *, started_at_ms: int) -> runs.Run:
        """See `ports.TransactionalHandler.page_effect`: the Run it creates."""
        resolved = self._plans.kept(dispatch, plan_model.RunCreatePlan)
        if resolved is None:
            raise errors.PlanInvalid("plan not inspected", code="plan_not_inspected")
        plan, _ = resolved
        return build_run(
            plan,
            dispatch,
            run_id=ids.new_run_id(started_at_ms),
            started_at_ms=started_at_ms,
            now_ms=started_at_ms,
        )

    def passage_effect(
        self, dispatch: records.Dispatch, stored: ports.StoredPlan, *, started_at_ms: int
    ) -> runs.Run:
        """See `ports.PassingHandler.passage_effect`: the Run it creates, if its plan is
        exactly the approved one."""
        plan, digest = self._plans.checked(stored, dispatch, plan_model.RunCreatePlan)
        if digest != dispatch.action_digest:
            raise errors.PlanInvalid("plan differs from the approved one", code="digest_drift")
        return build_run(
            plan,
            dispatch,
            run_id=ids.new_run_id(started_at_ms),
            started_at_ms=started_at_ms,
            now_ms=started_at_ms,
        )

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Re-parse the same plan, then create the Run, its receipt and the completion at once."""
        dispatch, identity = ctx.dispatch, ctx.identity
        plan, digest = await self._resolve(dispatch)
        if digest != dispatch.action_digest:
            # Nothing happened yet: an explicit failure, not an indeterminate one.
            return ports.ExecuteResult(kind=ports.ExecuteKind.FAILED, code="digest_drift")
        if self._fault_hook is not None:
            await self._fault_hook("before_effect", dispatch)
        delay = EFFECT_RETRY_FIRST_S
        while True:
            now = self._clock.now_ms()
            request = ports.RunCreateRequest(
                dispatch=dispatch,
                identity=identity,
                run=build_run(
                    plan,
                    dispatch,
                    run_id=ids.new_run_id(now),
                    started_at_ms=identity.started_at_ms,
                    now_ms=now,
                ),
                mutation_id=fencing.mutation_id(dispatch.dispatch_id, identity.attempt, "complete"),
                now_ms=now,
            )
            try:
                result = await self._repository.create_run(request)
                break
            except errors.StoreError as exc:
                if not exc.retryable or self._clock.now_ms() + delay * 1000 >= ctx.deadline_ms:
                    raise
                log.warning(
                    "run_create.effect_retry", dispatch_id=dispatch.dispatch_id, code=exc.code
                )
                await anyio.sleep(delay)
                delay = min(EFFECT_RETRY_MAX_S, delay * 2)
        if result.outcome in (ports.RunCreateOutcome.CREATED, ports.RunCreateOutcome.EXISTING):
            return ports.ExecuteResult(kind=ports.ExecuteKind.COMMITTED, code=result.outcome.value)
        if result.outcome is ports.RunCreateOutcome.CONFLICT:
            return ports.ExecuteResult(
                kind=ports.ExecuteKind.FAILED, code=result.reason or "run_conflict"
            )
        raise errors.LeaseConflict(f"execution fenced: {result.reason}")
