"""What a store transaction is written against, once for both dialects: `Query` and `Shared`.

A transaction is an `async def` taking a `Query`. It runs named statements — the same names
in each dialect's files (`adapters/sqlite/queries/`, `adapters/postgres/queries/`, and an
action's own `queries/sqlite.sql` and `queries/postgres.sql`) — and never anything else:
connecting, isolation, retries and error translation belong to the dialect's runner.

The store's own transactions live in `adapters/sql/`; a built-in action keeps the
transactions of its own tables in its package (`actions/run_create/store.py`,
`actions/tool_invoke/steps.py`, `actions/tool_invoke/barriers.py`) and runs them with its
own repository on the store (`ports.action_tables.StoreHost`). Those depend on this port and
the domain only: what they borrow of the store's transactions (the execution row, the fenced
completion, approving and consuming) the store hands over as a `Shared`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from qinglong_dispatcher.domain import approvals, records, states

T = TypeVar("T")

Params = Mapping[str, object]
"""Named parameters. A statement reads the names it uses; extra names are ignored."""

NO_PARAMS: Params = {}


@dataclasses.dataclass(frozen=True, eq=False)
class Rows:
    """A page of rows that one named block takes at once (`Query.run_rows`), each row the
    block's names and their plain JSON values (str, int, bool or None).

    SQLite binds each row in turn to each prepared statement of the block; PostgreSQL binds
    the page as one JSON array, encoded once however many blocks take the same rows.
    """

    items: list[dict[str, object]]

    @functools.cached_property
    def json(self) -> str:
        """The rows as one JSON array (PostgreSQL's parameter `rows`)."""
        return json.dumps(self.items)


Row = records.RowLike


class Query(Protocol):
    """Run one named statement inside the caller's transaction."""

    async def one(self, name: str, params: Params = NO_PARAMS) -> Any:
        """The first row (addressable by column name), or None."""
        ...

    async def all(self, name: str, params: Params = NO_PARAMS) -> list[Any]:
        """Every row."""
        ...

    async def run(self, name: str, params: Params = NO_PARAMS) -> None:
        """Run a statement for its effect."""
        ...

    async def run_many(self, name: str, params: Sequence[Params]) -> None:
        """Run a statement for its effect once per parameter set, in order (on PostgreSQL
        pipelined: one round trip for the lot, not one each)."""
        ...

    async def run_rows(self, name: str, rows: Rows, params: Params = NO_PARAMS) -> None:
        """Run a named block for its effect on a page of rows at once.

        The block reads each row's names beside `params`: SQLite runs each of its statements
        (one or a few, in order) once per row, a row's values bound directly, never parsed
        from JSON; PostgreSQL runs its one statement once for the page (the rows as one JSON
        array named `rows`, one round trip), where the tables a row writes are data-modifying
        CTEs of that statement."""
        ...

    async def savepoint(self, work: Work[T]) -> T:
        """Run `work` under a savepoint: on any exception only its writes are undone and the
        exception goes on, a driver error typed as `errors.StoreError` (the page transaction
        catches it and carries on with the rest)."""
        ...


Work = Callable[[Query], Coroutine[Any, Any, T]]
"""A whole transaction: the runner begins it, runs the body, and commits or rolls back."""


class Runner(Protocol):
    """What a dialect provides to run one transaction."""

    async def transaction(self, work: Work[T], *, write: bool = True) -> T:
        """Begin, run `work`, commit (a write) or end (a read); roll back on any exception."""
        ...


class Shared(Protocol):
    """The store's own transactions an action's transactions run inside theirs.

    The store hands one over (`adapters/sql/shared.py`): an action's package never imports
    an adapter, and the execution row, its fenced completion and an approval's life are
    written once, by the store.
    """

    async def read_row(
        self, q: Query, dispatch_id: str, *, lock: bool = False
    ) -> tuple[records.Execution, records.Dispatch] | None:
        """The execution and its dispatch, or None; `lock` holds the row until commit."""
        ...

    async def complete(
        self,
        q: Query,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
    ) -> records.Transition:
        """The fenced completion, replayed by mutation id (`ports.ExecutionStore.complete`)."""
        ...

    async def complete_checked(
        self,
        q: Query,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
    ) -> records.Transition:
        """The completion write alone, for a caller that read and fenced the row locked in
        this transaction (the update still repeats every condition)."""
        ...

    async def create_approval(
        self, q: Query, principal: approvals.Principal, new: approvals.NewApproval, *, now_ms: int
    ) -> approvals.Approval:
        """Insert the immutable plan and the pending request."""
        ...

    async def approve(
        self,
        q: Query,
        principal: approvals.Principal,
        approval_request_id: str,
        *,
        decided_by: str,
        now_ms: int,
    ) -> approvals.Approval:
        """`pending@v1 → approved@v2`, by another principal unless self-approval is allowed."""
        ...

    async def consume(
        self,
        q: Query,
        principal: approvals.Principal,
        approval_request_id: str,
        *,
        now_ms: int,
        max_attempts: int,
    ) -> approvals.Consumed:
        """`approved@v2 → consumed@v3`, the immutable dispatch and its pending execution."""
        ...

    async def database_now_ms(self, q: Query) -> int:
        """The database server's wall clock, in epoch milliseconds."""
        ...
