"""Past the store: execution row updates straight in SQL, to see what the database allows.

Migration 0006's triggers must allow exactly `states.ROW_UPDATES` whoever writes; the random
state machine tries an update from whatever state a sequence reached and rolls it back.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg

from qinglong_dispatcher.domain import ids, records, states
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import random_machine, stores


def _sql(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def transition_sql(
    dialect: str, row: records.Execution, to: ExecutionStatus, *, now_ms: int
) -> str:
    """An UPDATE of `row` to `to` that is well formed in every column but the transition.

    The columns are those the store writes for that change (a claim counts an attempt, a
    yield gives one back, a same-status update is a renew); the CHECK constraints all hold. So
    when the database refuses it, the state machine is why.
    """
    before = row.status
    expires = now_ms + random_machine.LEASE_MS
    sets: dict[str, object] = {
        "status": to.value,
        "version": row.version + 1,
        "updated_at_ms": now_ms,
        "eligible_at_ms": None,
        "retry_at_ms": None,
    }
    if to in (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING):
        sets["lease_expires_at_ms"] = max(expires, row.lease_expires_at_ms or 0)
        if row.lease_owner is None or (before, to) in (
            (ExecutionStatus.PENDING, ExecutionStatus.LEASED),
            (ExecutionStatus.RETRY_WAIT, ExecutionStatus.LEASED),
        ):
            sets.update(lease_owner="sql", lease_token="sql-token", attempt=row.attempt + 1)
    if to is ExecutionStatus.LEASED:
        sets["eligible_at_ms"] = sets["lease_expires_at_ms"]
        sets["started_at_ms"] = None
    elif to is ExecutionStatus.EXECUTING:
        sets["started_at_ms"] = row.started_at_ms or now_ms
    elif to is ExecutionStatus.PENDING:
        sets["eligible_at_ms"] = now_ms
        if before is ExecutionStatus.LEASED:
            sets["attempt"] = row.attempt - 1  # the yield's refund
    elif to is ExecutionStatus.RETRY_WAIT:
        sets["eligible_at_ms"] = sets["retry_at_ms"] = now_ms + random_machine.RETRY_BACKOFF_MS
    else:
        # A completion or release names its own new mutation (SQLite's settle guard asks).
        sets.update(
            completed_at_ms=now_ms, result_code="sql", result_mutation_id=f"sql-{row.version + 1}"
        )
    token = sets.get("lease_token", row.lease_token)
    if dialect == "postgres" and token is not None:
        # The holder's proof: this process claimed (or claims here), so it can present it;
        # migration 0011 refuses a move of a lease without it.
        sets["lease_proof"] = ids.lease_proof(str(token))
    table = "approved_action_dispatch_executions"
    if dialect == "postgres":
        table = f"qinglong.{table}"
    assignments = ", ".join(f"{column} = {_sql(value)}" for column, value in sets.items())
    return f"UPDATE {table} SET {assignments} WHERE dispatch_id = {_sql(row.dispatch_id)}"


REFUSAL_PREFIX = "qinglong:transition_refused: "


def expected_refusal(
    row: records.Execution, to: ExecutionStatus, dialect: str, *, now_ms: int
) -> str | None:
    """The rule of migrations 0006/0008 that must refuse `transition_sql(row, to)`, or None.

    Exactly the pairs outside `states.ROW_UPDATES` are refused for the state machine's sake
    (a terminal row for being terminal); an allowed claim is refused only past its budget,
    where the domain exhausts the row instead, and a waiting row is blocked only by that
    exhaustion (its code, not `sql`). On PostgreSQL the runtime login (who writes here) may
    never cancel: that is an operator's decision; on SQLite a cancel needs its audit row first.
    pending → pending is the wake of a handler wait, which only a `handler_missing` row due
    later admits; pending → succeeded is a passage (migration 0043), admitted only whole.
    """
    if row.status in states.TERMINAL:
        return "terminal"
    if (row.status, to) not in states.ROW_UPDATES:
        return "transition"
    claim = to is ExecutionStatus.LEASED and row.status is not ExecutionStatus.LEASED
    if claim and row.attempt >= row.max_attempts:
        return "attempt"
    if (row.status, to) == (ExecutionStatus.PENDING, ExecutionStatus.PENDING) and not (
        row.result_code == "handler_missing"
        and row.eligible_at_ms is not None
        and now_ms < row.eligible_at_ms
    ):
        return "wake"
    if (row.status, to) == (ExecutionStatus.PENDING, ExecutionStatus.SUCCEEDED):
        # Only as a whole passage, its claim's and start's columns and its receipt with it
        # (tests/security/test_hostile_passages.py); this update names neither.
        return "passage"
    if to is ExecutionStatus.CANCELLED and dialect == "postgres":
        return "operator"
    if to is ExecutionStatus.CANCELLED:
        return "unaudited"  # SQLite: the file's owner cancels, after the audit row it lacks
    waiting = (ExecutionStatus.PENDING, ExecutionStatus.RETRY_WAIT)
    if to is ExecutionStatus.BLOCKED and row.status in waiting:
        return "blocked"  # a waiting row is blocked only by exhausting it (`attempts_exhausted`)
    return None


def refusal_rule(error: BaseException | None) -> str | None:
    """The trigger rule named by a refusal (SQLite's RAISE, PostgreSQL's QLT01); None if none."""
    if error is None:
        return None
    if isinstance(error, asyncpg.PostgresError) and error.sqlstate != "QLT01":
        return f"not a trigger refusal: {error!r}"
    message = str(error)
    if not message.startswith(REFUSAL_PREFIX):
        return f"not a trigger refusal: {error!r}"
    return message.removeprefix(REFUSAL_PREFIX).split()[0]


class DirectSql:
    """Reads and writes past the store, over one connection kept for the whole test.

    On PostgreSQL it is the daemon's own login (a buggy or compromised runtime is what the
    triggers guard against); on SQLite a plain connection to the same file, used between store
    calls (so never while the store holds the write lock). Updates run in a transaction that
    is always rolled back.
    """

    def __init__(self, dialect: str, conn: Any) -> None:
        self._dialect = dialect
        self._conn = conn

    @classmethod
    async def open(cls, h: stores.Harness) -> DirectSql:
        """Connect next to the harness's store."""
        if h.dialect == "sqlite":
            path = str((await h.raw("PRAGMA database_list"))[0]["file"])
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            conn.row_factory = sqlite3.Row
            return cls("sqlite", conn)
        database = str(await h.scalar("SELECT current_database()"))
        return cls("postgres", await asyncpg.connect(stores.runtime_url(database)))

    async def close(self) -> None:
        """Release the connection."""
        if self._dialect == "sqlite":
            self._conn.close()
        else:
            await self._conn.close()

    def table(self, name: str) -> str:
        """A table's name in this dialect."""
        return name if self._dialect == "sqlite" else f"qinglong.{name}"

    async def fetch(self, sql: str) -> list[dict[str, Any]]:
        """The rows of one query."""
        if self._dialect == "sqlite":
            return [dict(row) for row in self._conn.execute(sql)]
        return [dict(row.items()) for row in await self._conn.fetch(sql)]

    async def try_update(self, sql: str) -> BaseException | None:
        """The database's error, or None when it would have accepted the statement."""
        if self._dialect == "sqlite":
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(sql)
            except sqlite3.DatabaseError as exc:
                return exc
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            return None
        transaction = self._conn.transaction()
        await transaction.start()
        try:
            await self._conn.execute(sql)
        except asyncpg.PostgresError as exc:
            refused: BaseException = exc
            return refused
        finally:
            await transaction.rollback()
        return None
