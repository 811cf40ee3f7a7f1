"""Ports of tool steps: the atomic start barrier and the StepRun store (docs/decisions/0019)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Protocol

from qinglong_dispatcher.domain import approvals, records, states
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps


class StartOutcome(enum.StrEnum):
    """Results of `ToolExecutionStartBarrierRepository.prepare` (docs/decisions/0019)."""

    CREATED = "created"
    """Every fact of the start committed in this call."""
    EXISTING = "existing"
    """An exact replay: the same command already committed this barrier."""
    CONFLICT = "conflict"
    """Refused, nothing written: an identity carries other content, or the Run/StepRun moved."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StartBarrierResult:
    """`prepare`'s answer; `barrier` is set when created or existing."""

    outcome: StartOutcome
    barrier: tool_barrier_checks.StoredBarrier | None = None
    reason: str | None = None


class ToolExecutionStartBarrierRepository(Protocol):
    """The atomic start of a Tool StepRun: evidence, mutation, RunEvent and barrier at once."""

    async def prepare(self, command: tool_start.StartCommand) -> StartBarrierResult:
        """One transaction in docs/decisions/0054's fixed order; all facts commit, or none do."""
        ...

    async def get_by_start_id(self, start_id: str) -> tool_barrier_checks.StoredBarrier | None:
        """The barrier of a start, re-checked; a corrupted row raises `StoreCorrupted`."""
        ...

    async def get_by_started_step_run_version(
        self, run_id: str, step_run_id: str, started_version: int
    ) -> tool_barrier_checks.StoredBarrier | None:
        """The barrier that started this StepRun version, re-checked."""
        ...


class ToolStepOutcome(enum.StrEnum):
    """Results of the tool completion transaction."""

    COMPLETED = "completed"
    EXISTING = "existing"
    FENCED = "fenced"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolStepCompletion:
    """The StepRun result and the execution completion, to commit together."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity
    step_run_id: str | None
    """The StepRun the plan names (None when the plan itself could not be read)."""
    completion: states.Completion
    result_code: str
    now_ms: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolStepCompletionResult:
    """What the completion transaction did; `step_status` is the StepRun's status after it."""

    outcome: ToolStepOutcome
    step_status: steps.StepRunStatus | None = None
    reason: str | None = None


class ToolStepRepository(Protocol):
    """Tool StepRuns: creation under a live Run, reads, and the settling transaction."""

    async def create_step_run(self, step: steps.NewStepRun, *, now_ms: int) -> steps.StepRun:
        """Create a `ready` or `waiting_approval` StepRun under a queued or running Run."""
        ...

    async def get_step_run(self, step_run_id: str) -> steps.StepRun | None:
        """One StepRun, its binding re-checked."""
        ...

    async def step_run_mutations(self, step_run_id: str) -> list[steps.Mutation]:
        """The ledger of one StepRun, oldest first, every digest re-checked."""
        ...

    async def submit_tool_invocation(
        self,
        new: approvals.NewApproval,
        step: steps.NewStepRun,
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> approvals.Consumed:
        """Plan, approval, `waiting_approval` StepRun, approve and consume: one transaction.

        A self-approval: refused whole where the principal may not self-approve.
        """
        ...

    async def complete_tool_step(self, request: ToolStepCompletion) -> ToolStepCompletionResult:
        """Settle the dispatch's StepRun (ledger + RunEvent) and complete the execution at once."""
        ...


class ToolSteps(ToolStepRepository, ToolExecutionStartBarrierRepository, Protocol):
    """`tool.invoke`'s repository: its StepRuns and its start barrier."""
