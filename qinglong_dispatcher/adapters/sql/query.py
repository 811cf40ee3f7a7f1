"""The runner side of store transactions: `operation` makes one a store method.

The transactions themselves are written against `ports.transactions.Query` (re-exported
here under its old names, so the store's own modules read `query.Query`). On SQLite the
query methods never suspend, so the runner drives the whole coroutine to its end inside one
worker-thread hop (`adapters/sqlite/database.drive`); asyncpg awaits it.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

# Re-exported: the store's own transactions are written against these names.
from qinglong_dispatcher.ports.transactions import NO_PARAMS as NO_PARAMS
from qinglong_dispatcher.ports.transactions import Params as Params
from qinglong_dispatcher.ports.transactions import Query as Query
from qinglong_dispatcher.ports.transactions import Row as Row
from qinglong_dispatcher.ports.transactions import Rows as Rows
from qinglong_dispatcher.ports.transactions import Runner as Runner
from qinglong_dispatcher.ports.transactions import Work as Work

T = TypeVar("T")
P = ParamSpec("P")


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
