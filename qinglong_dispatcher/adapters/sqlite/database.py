"""The one SQLite connection, driven from one worker thread, one hop per transaction.

Every transaction is a plain function over a stdlib `sqlite3.Connection`, run whole in a
worker thread under a capacity limiter of one: every store operation of the process is
serialised through the single connection, and a transaction costs one thread hop instead of
one per statement (docs/decisions/0004).
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.adapters.sqlite import queries
from qinglong_dispatcher.adapters.sqlite_file import access, reserve
from qinglong_dispatcher.domain import errors

T = TypeVar("T")

Transaction = Callable[[sqlite3.Connection], T]

TRANSITION_REFUSED = "qinglong:transition_refused"
APPROVAL_EXPIRED = "qinglong:approval_expired"
WINDOW_REFUSED = ("qinglong:window_refused", "qinglong:freeze_refused")
"""A start outside its window or under a freeze; a window or freeze changed (migration 0035)."""
"""The approval triggers' refusal to approve or consume past the lifetime (migration 0011)."""
"""Prefix of the state-machine triggers' RAISE(ABORT) messages (migration 0006)."""


VOTE_REFUSED = "approval_votes:"
"""Prefix of the vote triggers' refusals (migration 0026)."""

WINDOW_EMPTY = "qinglong:window_empty: "
"""Prefix of the refusal of a requested window that can never open (migration 0040)."""


def _vote_refusal(message: str) -> errors.ApprovalError:
    """The typed refusal of a vote, as PostgreSQL's SQLSTATEs give it."""
    if "requester may not vote" in message:
        return errors.SelfApprovalRefused(message)
    if "none of the policy's groups" in message:
        return errors.ApprovalNotPermitted(message)
    return errors.ApprovalTransitionRefused(message)


def connect(path: Path, *, busy_timeout_s: float, create: bool = True) -> sqlite3.Connection:
    """Open the file with the production pragmas: WAL, synchronous=FULL, foreign keys and
    temporary pages in memory.

    Without `create` (every command that only reads, and every one but `migrate` and `run`)
    a missing file or folder is an error naming the path: a mistyped path must never become
    a new empty database.
    """
    if create:
        try:
            access.create_private(path)
        except OSError as exc:
            raise errors.StoreUnavailable(
                f"SQLite file {path} cannot be created ({exc.strerror})"
            ) from exc
    else:
        try:
            there = path.is_file()
        except OSError as exc:  # a folder this user may not enter: named, never a traceback
            raise errors.StoreUnavailable(
                f"SQLite file {path} cannot be reached ({exc.strerror})"
            ) from exc
        if not there:
            raise errors.StoreUnavailable(f"SQLite file {path} does not exist (run migrate first)")
    try:
        conn = sqlite3.connect(
            # mode=rw never creates the file, even if it vanished since the check above.
            path if create else f"file:{path}?mode=rw",
            isolation_level=None,  # we issue BEGIN IMMEDIATE / COMMIT ourselves
            check_same_thread=False,  # one thread at a time, guaranteed by the limiter
            timeout=busy_timeout_s,
            uri=not create,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        # Before the first pragma that writes (WAL rewrites the header): never touch a file
        # that is another program's.
        if foreign := _foreign_tables(conn):
            conn.close()
            shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
            raise errors.SchemaForeign(
                f"SQLite file {path} is not a qinglong-dispatcher database (it holds {shown} "
                "and no schema_migrations); nothing was written"
            )
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise errors.DurabilityRefused(f"SQLite refused WAL journal mode (got {mode})")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # A write statement that a trigger may abort keeps the pages it changes in a statement
        # journal, which otherwise goes to a temporary file: a page transaction's statements
        # change a few hundred KiB at most, and kept in memory each row costs a third less
        # (docs/decisions/0058). `migrate`, which may rewrite whole tables, uses files.
        conn.execute("PRAGMA temp_store = MEMORY")
    except sqlite3.Error as exc:
        raise _named(translate(exc), path, exc) from exc
    return conn


def _foreign_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of a file that has some but not our migration ledger ([] otherwise)."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )
    ]
    return [] if not names or "schema_migrations" in names else names


def _named(
    error: errors.StoreError | errors.ApprovalError, path: Path, exc: sqlite3.Error
) -> errors.StoreError | errors.ApprovalError:
    """The store error of opening `path`, naming the file and SQLite's own reason."""
    if isinstance(error, errors.StoreUnavailable | errors.StoreCorrupted):
        reason = _reason(exc)
        if problem := access.write_problem(path):  # SQLite's "unable to open" names no cause
            reason = f"{reason}; {problem}"
        return type(error)(f"SQLite file {path} cannot be used: {reason}")
    return error


def _reason(exc: sqlite3.Error) -> str:
    """SQLite's own words and its result code (`disk I/O error (SQLITE_IOERR_WRITE)`): they
    name the cause, never row contents or a secret."""
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} ({name})" if name else str(exc)


def translate(exc: sqlite3.Error) -> errors.StoreError | errors.ApprovalError:
    """Map a driver error to a typed store error; nothing above the adapter sees sqlite3."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return errors.StoreBusy(f"SQLite file is busy: {_reason(exc)}")
    if primary == sqlite3.SQLITE_FULL:
        return errors.StoreFull(f"SQLite file cannot grow: {_reason(exc)}")
    if primary in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY):
        return errors.StoreUnavailable(f"SQLite file cannot be used: {_reason(exc)}")
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return errors.StoreCorrupted()
    if code == sqlite3.SQLITE_CONSTRAINT_TRIGGER and str(exc).startswith(
        (TRANSITION_REFUSED, *WINDOW_REFUSED)
    ):
        # The trigger's message names the rule it broke, never row contents.
        return errors.TransitionRefused(str(exc))
    if code == sqlite3.SQLITE_CONSTRAINT_TRIGGER and str(exc).startswith(APPROVAL_EXPIRED):
        return errors.ApprovalExpired(str(exc))
    if code == sqlite3.SQLITE_CONSTRAINT_TRIGGER and str(exc).startswith(WINDOW_EMPTY):
        return errors.WindowEmpty(str(exc).removeprefix(WINDOW_EMPTY))
    if code == sqlite3.SQLITE_CONSTRAINT_TRIGGER and str(exc).startswith(VOTE_REFUSED):
        return _vote_refusal(str(exc))
    if primary == sqlite3.SQLITE_CONSTRAINT:
        return errors.StoreError("a constraint refused the write", code="constraint_violation")
    return errors.StoreError(f"SQLite error ({exc.__class__.__name__})")


@functools.cache
def statements_of(block: str) -> tuple[str, ...]:
    """A named block's statements in order, split where SQLite says a statement is complete
    (never at a semicolon inside a string or a comment). The last one needs no semicolon:
    the loader strips a block's last."""
    found: list[str] = []
    current = ""
    for line in block.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            found.append(current.strip())
            current = ""
    if current.strip():
        found.append(current.strip())
    return tuple(found)


class SqliteQuery:
    """`query.Query` over the one connection: every method returns without suspending."""

    def __init__(self, conn: sqlite3.Connection, statements: Mapping[str, str]) -> None:
        self._conn = conn
        self._q = statements

    async def one(self, name: str, params: query.Params = query.NO_PARAMS) -> Any:
        """See `query.Query.one`."""
        return self._conn.execute(self._q[name], params).fetchone()

    async def all(self, name: str, params: query.Params = query.NO_PARAMS) -> list[Any]:
        """See `query.Query.all`."""
        return self._conn.execute(self._q[name], params).fetchall()

    async def run(self, name: str, params: query.Params = query.NO_PARAMS) -> None:
        """See `query.Query.run`."""
        self._conn.execute(self._q[name], params)

    async def run_many(self, name: str, params: Sequence[query.Params]) -> None:
        """See `query.Query.run_many`."""
        self._conn.executemany(self._q[name], params)

    async def run_rows(
        self, name: str, rows: query.Rows, params: query.Params = query.NO_PARAMS
    ) -> None:
        """See `query.Query.run_rows`: each statement of the block prepared once and stepped
        once per row (binding a row's values costs a fraction of extracting them from a JSON
        array in SQL)."""
        items = rows.items if not params else [{**row, **params} for row in rows.items]
        for statement in statements_of(self._q[name]):
            self._conn.executemany(statement, items)

    async def savepoint(self, work: query.Work[T]) -> T:
        """See `query.Query.savepoint`."""
        return await query.in_savepoint(
            self, work, lambda exc: translate(exc) if isinstance(exc, sqlite3.Error) else None
        )


def drive(work: Coroutine[Any, Any, T]) -> T:
    """Run a shared transaction's coroutine to its end on this thread, in one step.

    Its only awaits are `SqliteQuery` methods, which never suspend, so the first `send`
    finishes it: the whole transaction stays one hop, with no event loop on the worker thread.
    """
    try:
        work.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    work.close()
    raise RuntimeError("a SQLite transaction awaited something other than its queries")


def in_transaction(conn: sqlite3.Connection, body: Transaction[T]) -> T:
    """Run `body` inside BEGIN IMMEDIATE … COMMIT; roll back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def in_snapshot(conn: sqlite3.Connection, body: Transaction[T]) -> T:
    """Run a read-only `body` inside BEGIN … COMMIT: one snapshot for all its statements."""
    conn.execute("BEGIN")
    try:
        return body(conn)
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


class Database:
    """The single connection and the limiter that serialises every use of it."""

    def __init__(self, conn: sqlite3.Connection, path: Path, statements: Mapping[str, str]) -> None:
        self._conn: sqlite3.Connection | None = conn
        self.path = path
        self.statements = statements
        self._limiter = anyio.CapacityLimiter(1)
        self.reserve = reserve.Reserve(path, 0)
        """Given up, and the WAL checkpointed, by the first write that meets a full disk."""
        self.commits = 0
        """Write transactions committed through this connection (the bench counts them)."""
        self.worker_cpu_s = 0.0
        """CPU seconds spent inside the worker thread's hops (the bench reads them)."""
        self.worker_wall_s = 0.0
        """Wall seconds spent inside the worker thread's hops, lock waits included."""

    @classmethod
    async def open(
        cls, path: Path, actions: tuple[Path, ...], *, busy_timeout_s: float, create: bool
    ) -> Database:
        """Open the file on a worker thread (creating it only with `create`)."""
        conn = await anyio.to_thread.run_sync(
            lambda: connect(path, busy_timeout_s=busy_timeout_s, create=create)
        )
        return cls(conn, path, queries.load(actions))

    async def read(self, body: Transaction[T]) -> T:
        """Run a read-only body (autocommit reads see one consistent snapshot per statement)."""
        return await self._run(body, write=False)

    async def write(self, body: Transaction[T]) -> T:
        """Run `body` as one BEGIN IMMEDIATE transaction, in one hop."""
        return await self._run(body, write=True)

    async def transaction(self, work: query.Work[T], *, write: bool = True) -> T:
        """Run a shared transaction (`adapters/sql`) whole, in one hop.

        A read runs in a deferred transaction, so all its statements see one snapshot (WAL
        keeps it while another process commits): `dispatch show` never pairs an execution
        row with a ledger from a later commit."""
        named = self.statements
        if write:
            return await self._run(lambda conn: drive(work(SqliteQuery(conn, named))), write=True)
        return await self._run(
            lambda conn: in_snapshot(conn, lambda c: drive(work(SqliteQuery(c, named)))),
            write=False,
        )

    async def _run(self, body: Transaction[T], *, write: bool) -> T:
        conn = self._conn
        if conn is None:
            raise errors.StoreUnavailable("the store is closed")

        def hop() -> T:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                if write:
                    return in_transaction(conn, body)
                return body(conn)
            except sqlite3.Error as exc:
                error = _named(translate(exc), self.path, exc)
                if isinstance(error, errors.StoreFull):
                    # Rolled back already; on this hop, before any other write can come.
                    self.reserve.release(conn)
                raise error from exc
            finally:
                self.worker_cpu_s += time.thread_time() - cpu
                self.worker_wall_s += time.perf_counter() - wall

        # Not cancellable mid-transaction: a cancelled caller waits for the hop to finish,
        # so a transaction is always either committed or rolled back when control returns.
        result = await anyio.to_thread.run_sync(hop, limiter=self._limiter)
        if write:
            self.commits += 1
        return result

    def worker_costs(self) -> dict[str, float]:
        """What the hops so far cost: CPU and wall seconds, and rows the connection changed
        (triggers' rows included: `sqlite3_total_changes`)."""
        conn = self._conn
        return {
            "cpu_s": self.worker_cpu_s,
            "wall_s": self.worker_wall_s,
            "rows_changed": float(conn.total_changes if conn is not None else 0),
        }

    async def close(self) -> None:
        """Close the connection (checkpointing the WAL)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)
