"""The asyncpg pool: one short transaction per operation, a bounded retry, typed errors.

Every store operation is one transaction on a pooled connection. A serialization failure or
deadlock (SQLSTATE 40001/40P01) rolls the whole transaction back, and every body here is
safe to run again from the start, so it is retried at most `MAX_ATTEMPTS` times; any other
driver error is re-raised as a typed `errors.StoreError` (or, for the approval trigger's own
SQLSTATEs, a typed `errors.ApprovalError`: `driver_errors`) and nothing above this module
sees asyncpg.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import asyncpg

from qinglong_dispatcher.adapters.postgres.driver_errors import (
    DRIVER_ERRORS,
    RETRY_SQLSTATES,
    opening_error,
    translate,
)
from qinglong_dispatcher.adapters.postgres.queries import Statement, load
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import errors

T = TypeVar("T")

Connection = Any
"""An `asyncpg.Connection`; asyncpg ships no types, and this alias keeps `Any` in the adapter."""

Row = Any
"""An `asyncpg.Record`: addressable by column name, like `records.RowLike`."""

Transaction = Callable[[Connection], Awaitable[T]]

MAX_ATTEMPTS = 3
APPLICATION_NAME = "qinglong-dispatcher"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PoolConfig:
    """Pool size and the server-side timeouts every session runs with."""

    min_size: int = 1
    max_size: int = 10
    statement_timeout_s: float = 30.0
    lock_timeout_s: float = 5.0
    idle_in_transaction_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    acquire_timeout_s: float = 30.0

    def server_settings(self) -> dict[str, str]:
        """Startup parameters: a session keeps them, since every transaction sets only its
        own (`SET LOCAL`, `set_config(…, true)`; see `_transaction_state_only`)."""
        return {
            "application_name": APPLICATION_NAME,
            "statement_timeout": str(int(self.statement_timeout_s * 1000)),
            "lock_timeout": str(int(self.lock_timeout_s * 1000)),
            "idle_in_transaction_session_timeout": str(
                int(self.idle_in_transaction_timeout_s * 1000)
            ),
            # Short OLTP statements: JIT compilation would only add latency spikes.
            "jit": "off",
        }


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, asyncpg.PostgresError) and getattr(exc, "sqlstate", "") in (
        RETRY_SQLSTATES
    )


def _connection_lost(exc: BaseException) -> bool:
    """The session ended under us (terminated backend, reset socket, a pooled connection that
    died while idle); a timeout is not one: retrying it would only multiply the wait."""
    if isinstance(exc, TimeoutError):
        return False
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        return state.startswith("08") or state in ("57P01", "57P02", "57P03")
    return isinstance(
        exc, OSError | asyncpg.InterfaceError | asyncpg.exceptions.InternalClientError
    )


async def _transaction_state_only(conn: Connection) -> None:
    """Nothing beyond asyncpg's own rollback of an open transaction at release: every
    transaction sets only transaction-local state, which its end undoes, so the default reset
    query was a round trip that undid nothing (docs/decisions/0023). `Database.session`,
    whose user may leave session state, resets in full."""


async def _reset_or_end(conn: Connection) -> None:
    """`Connection.reset`; a session that cannot be reset is ended, never lent again."""
    with anyio.CancelScope(shield=True):
        try:
            await conn.reset()
        except DRIVER_ERRORS:
            conn.terminate()


class PgQuery:
    """`query.Query` over one pooled connection inside its transaction."""

    def __init__(self, conn: Connection, statements: Mapping[str, Statement]) -> None:
        self._conn = conn
        self._q = statements

    async def one(self, name: str, params: query.Params = query.NO_PARAMS) -> Row:
        """See `query.Query.one`."""
        return await fetchrow(self._conn, self._q[name], params)

    async def all(self, name: str, params: query.Params = query.NO_PARAMS) -> list[Row]:
        """See `query.Query.all`."""
        return await fetch(self._conn, self._q[name], params)

    async def run(self, name: str, params: query.Params = query.NO_PARAMS) -> None:
        """See `query.Query.run`."""
        await execute(self._conn, self._q[name], params)

    async def run_many(self, name: str, params: Sequence[query.Params]) -> None:
        """See `query.Query.run_many` (asyncpg pipelines `executemany`)."""
        statement = self._q[name]
        await self._conn.executemany(statement.text, [statement.args(p) for p in params])

    async def run_rows(
        self, name: str, rows: query.Rows, params: query.Params = query.NO_PARAMS
    ) -> None:
        """See `query.Query.run_rows`: one statement, the rows as the JSON array `rows`."""
        await execute(self._conn, self._q[name], {**params, "rows": rows.json})

    async def savepoint(self, work: query.Work[T]) -> T:
        """See `query.Query.savepoint`."""
        return await query.in_savepoint(
            self, work, lambda exc: translate(exc) if isinstance(exc, DRIVER_ERRORS) else None
        )


class Database:
    """A small pool; `read` and `write` run one transaction each."""

    def __init__(self, pool: Any, config: PoolConfig, statements: Mapping[str, Statement]) -> None:
        self._pool: Any = pool
        self.config = config
        self.statements = statements
        self.commits = 0
        """Write transactions committed through this pool (the bench counts them)."""

    @classmethod
    async def open(cls, url: str, config: PoolConfig, actions: tuple[Path, ...]) -> Database:
        """Create the pool and its first connection, so a bad URL fails here, typed."""
        try:
            pool = await asyncpg.create_pool(
                url,
                min_size=config.min_size,
                max_size=config.max_size,
                timeout=config.connect_timeout_s,
                # A client-side bound just above the server's, for a network that goes silent.
                command_timeout=config.statement_timeout_s + 5,
                server_settings=config.server_settings(),
                reset=_transaction_state_only,
            )
        except (asyncpg.exceptions.ClientConfigurationError, ValueError) as exc:
            raise errors.ConfigurationError(
                f"the PostgreSQL URL is not usable ({exc.__class__.__name__})"
            ) from exc
        except DRIVER_ERRORS as exc:
            raise opening_error(url, exc) from exc
        return cls(pool, config, load(actions))

    async def read(self, body: Transaction[T]) -> T:
        """Run a read-only body on one snapshot (REPEATABLE READ, READ ONLY)."""
        return await self._run(body, isolation="repeatable_read", readonly=True)

    async def write(self, body: Transaction[T], *, isolation: str = "read_committed") -> T:
        """Run `body` as one READ COMMITTED transaction; row locks and fenced updates decide.

        Another `isolation` is for a caller that needs one: its serialization failures are
        retried like deadlocks, at most `MAX_ATTEMPTS` times.
        """
        result = await self._run(body, isolation=isolation, readonly=False)
        self.commits += 1
        return result

    async def transaction(
        self, work: query.Work[T], *, write: bool = True, isolation: str = "read_committed"
    ) -> T:
        """Run a shared transaction (`adapters/sql`): a write (at `isolation`) or a read."""
        named = self.statements
        if not write:
            return await self.read(lambda conn: work(PgQuery(conn, named)))
        return await self.write(lambda conn: work(PgQuery(conn, named)), isolation=isolation)

    async def _run(self, body: Transaction[T], *, isolation: str, readonly: bool) -> T:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                async with self._connection() as conn:
                    # Shielded: a cancelled caller waits for COMMIT or ROLLBACK (bounded by the
                    # statement timeouts), so control never returns mid-transaction.
                    with anyio.CancelScope(shield=True):
                        async with conn.transaction(isolation=isolation, readonly=readonly):
                            return await body(conn)
            except DRIVER_ERRORS as exc:
                # A read that lost its connection wrote nothing: read again on a fresh one. A
                # write learns it, typed (its COMMIT may or may not have landed), and the
                # caller replays under its fence (docs/actions.md).
                again = _retryable(exc) or (readonly and _connection_lost(exc))
                if again and attempt < MAX_ATTEMPTS:
                    await anyio.sleep(random.uniform(0.005, 0.02) * attempt)
                    continue
                raise translate(exc) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def statement(
        self, name: str, params: Mapping[str, object], *, replay: bool = True
    ) -> Row:
        """One write statement as its own transaction: one round trip (the happy paths).

        A row back means it wrote and committed; None means it matched nothing and wrote
        nothing, and the caller falls back to its diagnosing transaction. `replay=False` is for
        a statement that is not fenced: a lost connection is raised, typed, as for a shared
        write transaction, since its COMMIT may or may not have landed.
        """
        statement = self.statements[name]
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                async with self._connection() as conn:
                    with anyio.CancelScope(shield=True):
                        row = await conn.fetchrow(statement.text, *statement.args(params))
            except DRIVER_ERRORS as exc:
                # A lost connection leaves it unknown whether the statement committed; running
                # it again is a replay: if the first one committed, the fenced statement now
                # matches nothing, returns None, and the caller's diagnosing transaction
                # recognises its own earlier write.
                again = _retryable(exc) or (replay and _connection_lost(exc))
                if again and attempt < MAX_ATTEMPTS:
                    await anyio.sleep(random.uniform(0.005, 0.02) * attempt)
                    continue
                raise translate(exc) from exc
            if row is not None:
                self.commits += 1
            return row
        raise AssertionError("unreachable: the last attempt returns or raises")

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        pool = self._pool
        if pool is None:
            raise errors.StoreUnavailable("the store is closed")
        try:
            conn = await pool.acquire(timeout=self.config.acquire_timeout_s)
        except TimeoutError as exc:
            raise errors.StoreBusy("no PostgreSQL connection became free in time") from exc
        try:
            yield conn
        finally:
            with anyio.CancelScope(shield=True):
                await pool.release(conn)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Connection]:
        """One connection for several transactions (the migration runner); errors typed.

        The runner holds a session advisory lock and runs administrator SQL, so the session is
        reset in full (`Connection.reset`) before the pool lends it again."""
        try:
            async with self._connection() as conn:
                try:
                    yield conn
                finally:
                    await _reset_or_end(conn)
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    async def close(self) -> None:
        """Close the pool, terminating connections that do not return in time."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        with anyio.move_on_after(5, shield=True) as scope:
            await pool.close()
        if scope.cancelled_caught:
            pool.terminate()


async def fetchrow(conn: Connection, statement: Statement, params: Mapping[str, object]) -> Row:
    """The first row, or None."""
    return await conn.fetchrow(statement.text, *statement.args(params))


async def fetch(conn: Connection, statement: Statement, params: Mapping[str, object]) -> list[Row]:
    """Every row."""
    rows: list[Row] = await conn.fetch(statement.text, *statement.args(params))
    return rows


async def execute(conn: Connection, statement: Statement, params: Mapping[str, object]) -> None:
    """Run a statement for its effect."""
    await conn.execute(statement.text, *statement.args(params))
