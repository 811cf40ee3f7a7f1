"""What a built-in action that owns tables lends the store: its statements and its hooks.

`run.create` and `tool.invoke` write tables only they use (`actions/run_create/`,
`actions/tool_invoke/`). The composition root hands their `ActionTables` to the store it
opens (`BuiltInTables`): the store loads their statements with its own, runs their
repositories over itself (`StoreHost`), and calls their hooks inside its own transactions
(a recovery resolution or a cancel settles their rows; `dispatch show` and `status` read
them). The store never imports an action.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from qinglong_dispatcher.domain import approvals, dispatch_views, records, runs
from qinglong_dispatcher.ports.executions import PageItem
from qinglong_dispatcher.ports.runs import RunCreateRepository, RunCreateRequest, RunCreateResult
from qinglong_dispatcher.ports.tool_steps import (
    StartBarrierResult,
    ToolExecutionStartBarrierRepository,
    ToolStepRepository,
)
from qinglong_dispatcher.ports.transactions import Params, Query, Runner, Shared, Work


class Sealer(Protocol):
    """Seals a plan as the store writes it."""

    def seal(self, new: approvals.NewApproval) -> approvals.NewApproval:
        """The approval with its plan sealed (as is without a key ring)."""
        ...


class StoreHost(Protocol):
    """What an action's repository runs on: the store's runner, principal and sealer, read
    at each call (a test may replace the runner)."""

    runner: Runner
    approver: approvals.Principal
    shared: Shared

    @property
    def envelopes(self) -> Sealer:
        """Seals the plans it writes."""
        ...

    async def barrier_transaction(self, work: Work[StartBarrierResult]) -> StartBarrierResult:
        """Run the start barrier's transaction (a dialect may give it a stricter isolation)."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DetailPart:
    """What the actions' tables add to a dispatch's detail (`dispatch_views.Detail`)."""

    receipt: runs.RunReceipt | None = None
    run_id: str | None = None
    step_run: dispatch_views.StepRunView | None = None


class ActionTables(Protocol):
    """The tables of one built-in action, as the store's shared transactions see them."""

    @property
    def statements(self) -> Path:
        """The folder of its named statements, one file per dialect (`<dialect>.sql`)."""
        ...

    async def settle(
        self,
        q: Query,
        dispatch: records.Dispatch,
        *,
        resolution: str,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """Its rows follow a dispatch a recovery resolution or a cancel settled (in the
        caller's transaction; nothing when the dispatch is not its own)."""
        ...

    async def detail(self, q: Query, dispatch: records.Dispatch, part: DetailPart) -> DetailPart:
        """`part` with what it knows of the dispatch added (the actions in order)."""
        ...

    async def count(self, q: Query, counts: records.StatusCounts) -> records.StatusCounts:
        """`counts` with its own rows counted, in the caller's snapshot."""
        ...


class ToolSteps(ToolStepRepository, ToolExecutionStartBarrierRepository, Protocol):
    """`tool.invoke`'s repository: its StepRuns and its start barrier."""


class RunCreateTables(ActionTables, Protocol):
    """`run.create`'s tables: its repository, the page transaction's rows and PostgreSQL's
    one-statement path."""

    def repository(self, host: StoreHost) -> RunCreateRepository:
        """Its operations, each a transaction of `host`."""
        ...

    def one_statement(self, request: RunCreateRequest) -> tuple[Params, RunCreateResult]:
        """The parameters of `create_run_fast` and its result when it wrote a row."""
        ...

    async def effects_taken(self, q: Query, dispatches: Sequence[records.Dispatch]) -> set[str]:
        """The dispatches of a page whose effect already exists."""
        ...

    async def run_ids(self, q: Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """The Run of each dispatch whose Run exists (held by its dispatch id as the Run's
        idempotency key)."""
        ...

    async def create_page(
        self,
        q: Query,
        done: Sequence[tuple[PageItem, records.ExecutionIdentity]],
        *,
        now_ms: int,
    ) -> None:
        """The effect rows of each item a page transaction started."""
        ...


class ToolInvokeTables(ActionTables, Protocol):
    """`tool.invoke`'s tables: its repository."""

    def repository(self, host: StoreHost) -> ToolSteps:
        """Its operations, each a transaction of `host`."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltInTables:
    """The built-in actions' tables, handed to the store by the composition root."""

    run_create: RunCreateTables
    tool_invoke: ToolInvokeTables

    @property
    def each(self) -> tuple[ActionTables, ...]:
        """Every action's tables, in the order their hooks run."""
        return (self.run_create, self.tool_invoke)

    @property
    def statements(self) -> tuple[Path, ...]:
        """Their statement folders, loaded with the dialect's own (`named_sql.load_dialect`)."""
        return tuple(tables.statements for tables in self.each)
