"""Crash points inside a store transaction, and ways to keep an action off the passage or
the page path.

`crash_inside(store, after=NAME, crash=...)` wraps the store's runner so that, in any write
transaction, `crash()` runs right after the named statement ran and before the commit: raise
a BaseException there (an in-process crash: the transaction rolls back) or SIGKILL the process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.adapters.sql.store import SqlStore
from qinglong_dispatcher.domain import records

T = TypeVar("T")


class _CrashingQuery:
    def __init__(self, inner: query.Query, after: str, crash: Callable[[], None]) -> None:
        self._inner = inner
        self._after = after
        self._crash = crash

    def _ran(self, name: str) -> None:
        if name == self._after:
            self._crash()

    async def one(self, name: str, params: query.Params = query.NO_PARAMS) -> Any:
        row = await self._inner.one(name, params)
        self._ran(name)
        return row

    async def all(self, name: str, params: query.Params = query.NO_PARAMS) -> list[Any]:
        rows = await self._inner.all(name, params)
        self._ran(name)
        return rows

    async def run(self, name: str, params: query.Params = query.NO_PARAMS) -> None:
        await self._inner.run(name, params)
        self._ran(name)

    async def run_many(self, name: str, params: Sequence[query.Params]) -> None:
        await self._inner.run_many(name, params)
        self._ran(name)

    async def run_rows(
        self, name: str, rows: query.Rows, params: query.Params = query.NO_PARAMS
    ) -> None:
        await self._inner.run_rows(name, rows, params)
        self._ran(name)

    async def savepoint(self, work: query.Work[T]) -> T:
        return await self._inner.savepoint(lambda _: work(self))


class _CrashingRunner:
    def __init__(self, inner: query.Runner, after: str, crash: Callable[[], None]) -> None:
        self._inner = inner
        self._after = after
        self._crash = crash

    async def transaction(self, work: query.Work[T], *, write: bool = True, **kw: Any) -> T:
        return await self._inner.transaction(
            lambda q: work(_CrashingQuery(q, self._after, self._crash)), write=write, **kw
        )


def crash_inside(store: object, *, after: str, crash: Callable[[], None]) -> None:
    """Make every transaction of `store` call `crash()` right after statement `after`."""
    assert isinstance(store, SqlStore)
    store.runner = _CrashingRunner(store.runner, after, crash)


class PerItemOnly:
    """An action as it was before the page path: the same inspect and execute, not declared
    transactional, so its items take the per-item path (barrier, execute, complete)."""

    def __init__(self, handler: ports.ApprovedActionHandler) -> None:
        self.action_type = handler.action_type
        self._handler = handler

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return await self._handler.inspect(dispatch)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        return await self._handler.execute(ctx)


class PageOnly(PerItemOnly):
    """An action as it was before passages: transactional (its claimed items take the page
    transaction), but its due rows never pass."""

    def __init__(self, handler: run_create.RunCreateHandler) -> None:
        super().__init__(handler)
        self._transactional = handler
        self.page_effects = handler.page_effects

    def page_effect(self, dispatch: records.Dispatch, *, started_at_ms: int) -> object:
        return self._transactional.page_effect(dispatch, started_at_ms=started_at_ms)
