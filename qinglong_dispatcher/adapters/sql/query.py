"""The small query interface every store transaction is written against, once for both dialects.

A transaction is an `async def` taking a `Query`. It runs named statements — the same names
in `adapters/sqlite/queries/` and `adapters/postgres/queries/` — and never anything
else: connecting, isolation, retries and error translation belong to the dialect's runner.
On SQLite the query methods never suspend, so the runner drives the whole coroutine to its
end inside one worker-thread hop (`adapters/sqlite/database.drive`); asyncpg awaits it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from qinglong_dispatcher.domain import records

T = TypeVar("T")
P = ParamSpec("P")

Params = Mapping[str, object]
"""Named parameters. A statement reads the names it uses; extra names are ignored."""

NO_PARAMS: Params = {}

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

    async def savepoint(self, work: Work[T]) -> T:
        """Run `work` under a savepoint: on any exception only its writes are undone and the
        exception goes on, a driver error typed as `errors.StoreError` (the page transaction
        catches it and carries on with the rest)."""
        ...


async def in_savepoint(
    q: Query, work: Work[T], typed: Callable[[BaseException], Exception | None]
) -> T:
    """`Query.savepoint` for both dialects; `typed` is a driver error's typed store error
    (None for any other exception, which goes on as it is)."""
    await q.run("savepoint")
    try:
        result = await work(q)
    except BaseException as exc:
        await q.run("rollback_to_savepoint")
        await q.run("release_savepoint")
        error = typed(exc)
        if error is not None:
            raise error from exc
        raise
    await q.run("release_savepoint")
    return result


Work = Callable[[Query], Coroutine[Any, Any, T]]
"""A whole transaction: the runner begins it, runs the body, and commits or rolls back."""


class Runner(Protocol):
    """What a dialect provides to run one shared transaction."""

    async def transaction(self, work: Work[T], *, write: bool = True) -> T:
        """Begin, run `work`, commit (a write) or end (a read); roll back on any exception."""
        ...


class HasRunner(Protocol):
    """A store: what runs its transactions (replaceable, so a test can wrap it)."""

    runner: Runner


def operation(
    work: Callable[Concatenate[Query, P], Coroutine[Any, Any, T]], *, write: bool = True
) -> Callable[Concatenate[HasRunner, P], Coroutine[Any, Any, T]]:
    """The store method that runs `work` as one transaction of the store's runner.

    The method takes `work`'s parameters after the query, so mypy checks the store against
    its ports through these signatures: a transaction is written once, and nothing forwards.
    """

    async def method(self: HasRunner, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.runner.transaction(lambda q: work(q, *args, **kwargs), write=write)

    method.__name__ = work.__name__
    method.__doc__ = work.__doc__
    return method
