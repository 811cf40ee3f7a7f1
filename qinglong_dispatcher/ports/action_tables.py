"""What a built-in action that owns tables lends the store, and what its repository runs on.

`run.create` and `tool.invoke` write tables only they use (`actions/run_create/`,
`actions/tool_invoke/`). The composition root hands their `ActionTables` to the store it
opens (`BuiltInTables`): the store loads their statements with its own and calls their hooks
inside its own transactions (a recovery resolution or a cancel settles their rows; `dispatch
show` and `status` read them). Each action's repository is its own, built by the action over
the store (`StoreHost`): the store neither imports an action nor names one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from qinglong_dispatcher.domain import approvals, dispatch_views, records, runs
from qinglong_dispatcher.ports.transactions import Params, Query, Runner, Shared, Work

T = TypeVar("T")


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

    async def barrier_transaction(self, work: Work[T]) -> T:
        """Run a start barrier's transaction (a dialect may give it a stricter isolation)."""
        ...

    async def fast_statement(self, name: str, params: Params) -> Any:
        """A happy path's one statement as its own transaction, where the dialect has one
        (PostgreSQL: one round trip instead of BEGIN, statements, COMMIT): its row when it
        wrote. None when it matched nothing, or the dialect runs none (SQLite: the caller's
        transaction is its happy path, one hop); the caller then runs that transaction."""
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

    async def run_ids(self, q: Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """The Run each of these dispatches created, for those of its own that did
        (`ports.DispatchReadStore.dispatch_run_ids`)."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuiltInTables:
    """The built-in actions' tables, handed to the store by the composition root."""

    each: tuple[ActionTables, ...]
    """Every action's tables, in the order their hooks run."""

    @property
    def statements(self) -> tuple[Path, ...]:
        """Their statement folders, loaded with the dialect's own (`named_sql.load_dialect`)."""
        return tuple(tables.statements for tables in self.each)
