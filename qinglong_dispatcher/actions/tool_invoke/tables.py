"""`tool.invoke`'s repository over the store (`Repository`), and what it lends the store
(`ports.action_tables.ActionTables`): `TABLES`.

The repository runs the transactions of `steps.py` and `barriers.py` on the store the action
is given (`ports.action_tables.StoreHost`); a recovery resolution or a cancel moves the
dispatch's StepRun through `TABLES.settle`. Written against the ports and the domain only,
like those modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import barriers, steps
from qinglong_dispatcher.domain import approvals, dispatch_views, records
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps as step_records
from qinglong_dispatcher.ports import action_tables
from qinglong_dispatcher.ports import transactions as tx


class Repository:
    """`ports.ToolSteps`, each operation one transaction of the store (`host`)."""

    def __init__(self, host: action_tables.StoreHost) -> None:
        self.host = host

    async def create_step_run(
        self, step: step_records.NewStepRun, *, now_ms: int
    ) -> step_records.StepRun:
        """See `ports.ToolStepRepository.create_step_run`."""
        return await self.host.runner.transaction(lambda q: steps.create(q, step, now_ms=now_ms))

    async def get_step_run(self, step_run_id: str) -> step_records.StepRun | None:
        """See `ports.ToolStepRepository.get_step_run`."""
        return await self.host.runner.transaction(lambda q: steps.get(q, step_run_id), write=False)

    async def step_run_mutations(self, step_run_id: str) -> list[step_records.Mutation]:
        """See `ports.ToolStepRepository.step_run_mutations`."""
        return await self.host.runner.transaction(
            lambda q: steps.mutations(q, step_run_id), write=False
        )

    async def get_by_start_id(self, start_id: str) -> tool_barrier_checks.StoredBarrier | None:
        """See `ports.ToolExecutionStartBarrierRepository.get_by_start_id`."""
        return await self.host.runner.transaction(
            lambda q: barriers.get_by_start_id(q, start_id), write=False
        )

    async def get_by_started_step_run_version(
        self, run_id: str, step_run_id: str, started_version: int
    ) -> tool_barrier_checks.StoredBarrier | None:
        """See `ports.ToolExecutionStartBarrierRepository.get_by_started_step_run_version`."""
        return await self.host.runner.transaction(
            lambda q: barriers.get_by_started_version(q, run_id, step_run_id, started_version),
            write=False,
        )

    async def submit_tool_invocation(
        self,
        new: approvals.NewApproval,
        step: step_records.NewStepRun,
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> approvals.Consumed:
        """See `ports.ToolStepRepository.submit_tool_invocation` (its plan sealed)."""
        host = self.host
        sealed = host.envelopes.seal(new)
        return await host.runner.transaction(
            lambda q: steps.submit(
                q,
                host.shared,
                host.approver,
                sealed,
                step,
                approved_by=approved_by,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def complete_tool_step(
        self, request: ports.ToolStepCompletion
    ) -> ports.ToolStepCompletionResult:
        """See `ports.ToolStepRepository.complete_tool_step`."""
        host = self.host
        try:
            return await host.runner.transaction(lambda q: steps.complete(q, host.shared, request))
        except steps.Refused as refused:
            return ports.ToolStepCompletionResult(
                outcome=ports.ToolStepOutcome.FENCED, reason=refused.reason
            )

    async def prepare(self, command: tool_start.StartCommand) -> ports.StartBarrierResult:
        """See `ports.ToolExecutionStartBarrierRepository.prepare`."""
        host = self.host
        try:
            return await host.barrier_transaction(
                lambda q: barriers.prepare(q, host.shared, command, principal=host.approver.name)
            )
        except steps.Refused as refused:
            return ports.StartBarrierResult(
                outcome=ports.StartOutcome.CONFLICT, reason=refused.reason
            )


class Tables:
    """`ports.action_tables.ActionTables` for `tool.invoke`."""

    statements = steps.STATEMENTS

    async def settle(
        self,
        q: tx.Query,
        dispatch: records.Dispatch,
        *,
        resolution: str,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """The dispatch's StepRun follows it (`steps.settle`): bookkeeping only."""
        if dispatch.action_type == tool_start.TOOL_INVOKE:
            await steps.settle(
                q, dispatch, resolution=resolution, reason_code=reason_code, now_ms=now_ms
            )

    async def detail(
        self, q: tx.Query, dispatch: records.Dispatch, part: action_tables.DetailPart
    ) -> action_tables.DetailPart:
        """The StepRun bound to the dispatch's approval, and its Run when none is known yet."""
        step = await steps.get_by_approval(q, dispatch.approval_request_id)
        if step is None:
            return part
        return dataclasses.replace(
            part,
            run_id=step.binding.run_id if part.run_id is None else part.run_id,
            step_run=dispatch_views.StepRunView.of(step),
        )

    async def count(self, q: tx.Query, counts: records.StatusCounts) -> records.StatusCounts:
        """StepRuns per status (`status`, the metrics)."""
        return dataclasses.replace(counts, step_runs=await steps.count_by_status(q))

    async def run_ids(self, q: tx.Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """None: a tool step creates no Run."""
        return {}


TABLES = Tables()
"""What the composition root hands the store for `tool.invoke`."""
