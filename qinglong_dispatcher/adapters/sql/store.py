"""`SqlStore`: the store port operations written once; a dialect supplies the runner.

Each method is one shared transaction (`adapters/sql/*`) run by the dialect's runner; a
dialect's store subclasses this and adds only what is its own (opening, migrations, the
durability check, measured fast paths).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import (
    approvals,
    cancels,
    completions,
    dispatch_views,
    execution_store,
    page,
    query,
    recovery,
    retention,
    runs,
    tool_barriers,
    tool_steps,
)
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import cancels as cancel_records
from qinglong_dispatcher.domain import dispatch_views as views
from qinglong_dispatcher.domain import errors, records, states
from qinglong_dispatcher.domain import recovery as recovery_records
from qinglong_dispatcher.domain import runs as run_records
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps


class SqlStore(execution_store.ExecutionOperations, retention.RetentionOperations):
    """The operations whose transactions are shared (the rest move here as they are)."""

    def __init__(self, runner: query.Runner, approver: approval_records.Principal) -> None:
        self.runner = runner
        self.approver = approver
        """Who creates, decides and consumes approvals through this store."""

    async def release_preflight(
        self,
        lease: records.Lease,
        *,
        mutation_id: str,
        kind: states.ReleaseKind,
        result_code: str,
        retry_at_ms: int | None,
        now_ms: int,
    ) -> records.Transition:
        """See `ports.ExecutionStore.release_preflight`."""
        return await self.runner.transaction(
            functools.partial(
                completions.release_preflight,
                lease=lease,
                mutation_id=mutation_id,
                kind=kind,
                result_code=result_code,
                retry_at_ms=retry_at_ms,
                now_ms=now_ms,
            )
        )

    async def complete(
        self,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
    ) -> records.Transition:
        """See `ports.ExecutionStore.complete`."""
        return await self.runner.transaction(
            functools.partial(
                completions.complete,
                identity=identity,
                mutation_id=mutation_id,
                completion=completion,
                result_code=result_code,
                now_ms=now_ms,
            )
        )

    async def create_approval(
        self, new: approval_records.NewApproval, *, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.create_approval`."""
        return await self.runner.transaction(
            functools.partial(approvals.create, new=new, principal=self.approver, now_ms=now_ms)
        )

    async def approve(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.approve`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.approve,
                approval_request_id=approval_request_id,
                decided_by=decided_by,
                principal=self.approver,
                now_ms=now_ms,
            )
        )

    async def reject(
        self, approval_request_id: str, *, decided_by: str, now_ms: int
    ) -> approval_records.Approval:
        """See `ports.ApprovalStore.reject`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.reject,
                approval_request_id=approval_request_id,
                decided_by=decided_by,
                principal=self.approver,
                now_ms=now_ms,
            )
        )

    async def consume(
        self, approval_request_id: str, *, now_ms: int, max_attempts: int
    ) -> approval_records.Consumed:
        """See `ports.ApprovalStore.consume`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.consume,
                approval_request_id=approval_request_id,
                principal=self.approver,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def submit(
        self,
        items: Sequence[approval_records.NewApproval],
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> list[approval_records.Consumed]:
        """See `ports.ApprovalStore.submit`."""
        return await self.runner.transaction(
            functools.partial(
                approvals.submit,
                items=tuple(items),
                approved_by=approved_by,
                principal=self.approver,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def get_approval(self, approval_request_id: str) -> approval_records.Approval | None:
        """See `ports.ApprovalStore.get_approval`."""
        return await self.runner.transaction(
            functools.partial(approvals.get, approval_request_id=approval_request_id),
            write=False,
        )

    # -- plans and run.create ------------------------------------------------------------

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan | None:
        """See `ports.PlanStore.get_plan`."""
        return await self.runner.transaction(
            functools.partial(runs.get_plan, project_id=project_id, action_ref=action_ref),
            write=False,
        )

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        """See `ports.PlanStore.get_plans`."""
        return await self.runner.transaction(
            functools.partial(runs.get_plans, keys=tuple(keys)), write=False
        )

    async def create_run(self, request: ports.RunCreateRequest) -> ports.RunCreateResult:
        """See `ports.RunCreateRepository.create_run`."""
        try:
            return await self.runner.transaction(functools.partial(runs.create, request=request))
        except runs.FencedEffect as fenced:
            return ports.RunCreateResult(
                outcome=ports.RunCreateOutcome.FENCED, reason=fenced.reason
            )

    async def commit_page(
        self, items: Sequence[ports.PageItem], *, now_ms: int, lease_ms: int
    ) -> list[ports.PageResult]:
        """See `ports.PageStore.commit_page`."""
        page_items = tuple(items)
        try:
            return await self.runner.transaction(
                functools.partial(
                    page.commit_page, items=page_items, now_ms=now_ms, lease_ms=lease_ms
                )
            )
        except errors.StoreFull:
            # Every item would fail alike, and the per-item path would commit start barriers
            # it could not follow with effects: the page waits for its leases to run out.
            raise
        except (errors.StoreError, page.PartRefused):
            # Rolled back whole (or its commit unacknowledged: then every item it committed is
            # fenced now and comes back not taken). Again, each item under its own savepoint.
            return await self.runner.transaction(
                functools.partial(
                    page.commit_each, items=page_items, now_ms=now_ms, lease_ms=lease_ms
                )
            )

    async def get_receipt(self, dispatch_id: str) -> run_records.RunReceipt | None:
        """See `ports.RunCreateRepository.get_receipt`."""
        return await self.runner.transaction(
            functools.partial(runs.get_receipt, dispatch_id=dispatch_id), write=False
        )

    async def get_run_by_key(self, project_id: str, idempotency_key: str) -> run_records.Run | None:
        """See `ports.RunCreateRepository.get_run_by_key`."""
        return await self.runner.transaction(
            functools.partial(
                runs.get_run_by_key, project_id=project_id, idempotency_key=idempotency_key
            ),
            write=False,
        )

    async def get_run(self, run_id: str) -> run_records.Run | None:
        """See `ports.RunCreateRepository.get_run`."""
        return await self.runner.transaction(
            functools.partial(runs.get_run, run_id=run_id), write=False
        )

    # -- recovery (DESIGN.md §6) ---------------------------------------------------------

    async def list_recovery_required(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[recovery_records.Snapshot]:
        """See `ports.RecoveryStore.list_recovery_required`."""
        return await self.runner.transaction(
            functools.partial(
                recovery.list_recovery_required, now_ms=now_ms, limit=limit, after=after
            ),
            write=False,
        )

    async def resolve_recovery(
        self, resolution: recovery_records.Resolution, *, now_ms: int
    ) -> records.Transition:
        """See `ports.RecoveryStore.resolve_recovery`."""
        return await self.runner.transaction(
            functools.partial(
                recovery.resolve,
                resolution=resolution,
                principal=self.approver.name,
                now_ms=now_ms,
            )
        )

    async def cancel_dispatch(
        self, request: cancel_records.Cancel, *, now_ms: int
    ) -> records.Transition:
        """See `ports.CancelStore.cancel_dispatch`."""
        return await self.runner.transaction(
            functools.partial(
                cancels.cancel, request=request, principal=self.approver.name, now_ms=now_ms
            )
        )

    async def record_observation(
        self,
        dispatch_id: str,
        *,
        outcome: recovery_records.ObservationOutcome,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """See `ports.RecoveryStore.record_observation`."""
        await self.runner.transaction(
            functools.partial(
                recovery.record_observation,
                dispatch_id=dispatch_id,
                outcome=outcome,
                reason_code=reason_code,
                now_ms=now_ms,
            )
        )

    async def get_resolution(self, dispatch_id: str) -> recovery_records.StoredResolution | None:
        """See `ports.RecoveryStore.get_resolution`."""
        return await self.runner.transaction(
            functools.partial(recovery.get_resolution, dispatch_id=dispatch_id), write=False
        )

    async def audit_events(self, subject_id: str) -> list[recovery_records.AuditEvent]:
        """See `ports.RecoveryStore.audit_events`."""
        return await self.runner.transaction(
            functools.partial(recovery.audit_events, subject_id=subject_id), write=False
        )

    # -- reading dispatches (`dispatch list|show`) ----------------------------------------

    async def list_dispatches(self, request: views.ListQuery, *, now_ms: int) -> views.Page:
        """See `ports.DispatchReadStore.list_dispatches`."""
        return await self.runner.transaction(
            functools.partial(dispatch_views.list_dispatches, request=request, now_ms=now_ms),
            write=False,
        )

    async def show_dispatch(self, dispatch_id: str, *, now_ms: int) -> views.Detail | None:
        """See `ports.DispatchReadStore.show_dispatch`."""
        return await self.runner.transaction(
            functools.partial(dispatch_views.show_dispatch, dispatch_id=dispatch_id, now_ms=now_ms),
            write=False,
        )

    async def dispatch_run_ids(self, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """See `ports.DispatchReadStore.dispatch_run_ids`."""
        return await self.runner.transaction(
            functools.partial(dispatch_views.run_ids, dispatch_ids=tuple(dispatch_ids)),
            write=False,
        )

    # -- tool steps and the start barrier (ADR-0158) --------------------------------------

    async def create_step_run(self, step: steps.NewStepRun, *, now_ms: int) -> steps.StepRun:
        """See `ports.ToolStepRepository.create_step_run`."""
        return await self.runner.transaction(
            functools.partial(tool_steps.create, new=step, now_ms=now_ms)
        )

    async def get_step_run(self, step_run_id: str) -> steps.StepRun | None:
        """See `ports.ToolStepRepository.get_step_run`."""
        return await self.runner.transaction(
            functools.partial(tool_steps.get, step_run_id=step_run_id), write=False
        )

    async def step_run_mutations(self, step_run_id: str) -> list[steps.Mutation]:
        """See `ports.ToolStepRepository.step_run_mutations`."""
        return await self.runner.transaction(
            functools.partial(tool_steps.mutations, step_run_id=step_run_id), write=False
        )

    async def submit_tool_invocation(
        self,
        new: approval_records.NewApproval,
        step: steps.NewStepRun,
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> approval_records.Consumed:
        """See `ports.ToolStepRepository.submit_tool_invocation`."""
        return await self.runner.transaction(
            functools.partial(
                tool_steps.submit,
                new=new,
                step=step,
                approved_by=approved_by,
                principal=self.approver,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def complete_tool_step(
        self, request: ports.ToolStepCompletion
    ) -> ports.ToolStepCompletionResult:
        """See `ports.ToolStepRepository.complete_tool_step`."""
        try:
            return await self.runner.transaction(
                functools.partial(tool_steps.complete, request=request)
            )
        except tool_steps.Refused as refused:
            return ports.ToolStepCompletionResult(
                outcome=ports.ToolStepOutcome.FENCED, reason=refused.reason
            )

    async def prepare(self, command: tool_start.StartCommand) -> ports.StartBarrierResult:
        """See `ports.ToolExecutionStartBarrierRepository.prepare`."""
        try:
            return await self.barrier_transaction(
                functools.partial(
                    tool_barriers.prepare, command=command, principal=self.approver.name
                )
            )
        except tool_steps.Refused as refused:
            return ports.StartBarrierResult(
                outcome=ports.StartOutcome.CONFLICT, reason=refused.reason
            )

    async def barrier_transaction(
        self, work: query.Work[ports.StartBarrierResult]
    ) -> ports.StartBarrierResult:
        """Run the start barrier's transaction (a dialect may give it a stricter isolation)."""
        return await self.runner.transaction(work)

    async def get_by_start_id(self, start_id: str) -> tool_barrier_checks.StoredBarrier | None:
        """See `ports.ToolExecutionStartBarrierRepository.get_by_start_id`."""
        return await self.runner.transaction(
            functools.partial(tool_barriers.get_by_start_id, start_id=start_id), write=False
        )

    async def get_by_started_step_run_version(
        self, run_id: str, step_run_id: str, started_version: int
    ) -> tool_barrier_checks.StoredBarrier | None:
        """See `ports.ToolExecutionStartBarrierRepository.get_by_started_step_run_version`."""
        return await self.runner.transaction(
            functools.partial(
                tool_barriers.get_by_started_version,
                run_id=run_id,
                step_run_id=step_run_id,
                started_version=started_version,
            ),
            write=False,
        )
