"""The harness of the randomized state-machine test: its session, its state, its invariant.

`MachineBase` holds what every rule moves (the model's rows, tokens, the example's clock) and
checks after every step that the database and its ledger hold what the model predicts
(`random_machine.Row`). The rules are its subclasses': `random_recovery.RecoveryRules` and the
test's `ExecutionMachine` (tests/contract/test_state_machine_random.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import Awaitable, Iterator
from typing import ClassVar, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant

from qinglong_dispatcher.domain import records, states
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import direct_sql, random_machine, stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock
from tests.support.random_machine import Row

T = TypeVar("T")
M = TypeVar("M", bound="MachineBase")

# CI runs a bounded search (≈10–20 s a dialect); QINGLONG_STATEFUL_EXAMPLES and
# QINGLONG_STATEFUL_STEPS ask for a longer one.
EXAMPLES = int(os.environ.get("QINGLONG_STATEFUL_EXAMPLES") or 60)
STEPS = int(os.environ.get("QINGLONG_STATEFUL_STEPS") or 60)
LONG_RUN = "QINGLONG_STATEFUL_EXAMPLES" in os.environ

WINDOW_MS = 10_000_000
"""Each example lives in its own slice of time, below the previous example's (see `Session`)."""
WALL_SLACK_MS = 2_000
"""Ledger times come from the database clock: the wall clock, within the skew guard's default."""

INDEX = st.integers(0, random_machine.DISPATCHES - 1)
"""One of the example's rows, by position."""

CLAIMS = Bundle("claims")
"""Leases the claims handed out (and renewals of them)."""
STARTED = Bundle("started")
"""Execution identities the start barrier handed out (and renewals of them)."""
SNAPSHOTS = Bundle("snapshots")
"""Recovery snapshots an operator listed."""


def wall_ms() -> int:
    """The system wall clock (never the manual clock the store is driven with)."""
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class Session:
    """One database per test; every example gets fresh dispatches in a fresh slice of time.

    Opening a PostgreSQL database per example costs a template clone and two pools, so the
    examples share one. They cannot see each other: example n runs its clock in
    [START_MS - n·WINDOW, START_MS - (n-1)·WINDOW), and every time a row of an earlier example
    can be due at, or expire at, lies above that, so no claim page and no recovery page of a
    later example reaches it (the due scan is `eligible_at_ms <= now`, recovery
    `lease_expires_at_ms <= now`).
    """

    runner: asyncio.Runner
    harness: stores.Harness
    sql: direct_sql.DirectSql
    """Reads and tries writes past the store."""
    examples: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))

    def run(self, awaitable: Awaitable[T]) -> T:
        """Drive one store call to its end on the session's event loop."""

        async def wrapped() -> T:
            return await awaitable

        return self.runner.run(wrapped())


class MachineBase(RuleBasedStateMachine):
    """The state every rule moves, and the invariant checked after every step."""

    session: ClassVar[Session]

    def __init__(self) -> None:
        super().__init__()
        n = next(self.session.examples)
        self.h = self.session.harness
        self.clock = ManualClock(START_MS - n * WINDOW_MS)
        self.window_end = self.clock.now_ms() + WINDOW_MS
        self.evidence = random_machine.ScriptedEvidence()
        consumed = self.session.run(
            submit_runs(
                self.h.approver_store,
                self.clock,
                random_machine.DISPATCHES,
                project=f"sm-{n}",
                max_attempts=random_machine.MAX_ATTEMPTS,
            )
        )
        self.rows: list[Row] = []
        # Ordered by id, as equal due times are: rule arguments then mean the same rows in every
        # replay although the ids are random (otherwise hypothesis sees a flaky strategy).
        for each in sorted(consumed, key=lambda c: c.dispatch_id):
            dispatch = self.session.run(self.h.store.get_dispatch(each.dispatch_id))
            assert dispatch is not None
            self.rows.append(Row(dispatch=dispatch, eligible_at_ms=self.clock.now_ms()))
        self.by_id = {row.dispatch_id: row for row in self.rows}
        self.tokens: dict[tuple[str, str], str] = {}
        """The last token each (dispatch, owner) claimed with."""
        self.fresh = itertools.count()
        self.checked_events = dict.fromkeys(self.by_id, 0)
        self.wall_from = wall_ms()

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.session.run(awaitable)

    def now(self) -> int:
        return self.clock.now_ms()

    # -- invariants ----------------------------------------------------------------------

    async def _read_all(
        self,
    ) -> tuple[dict[str, records.Execution], dict[str, list[records.ExecutionEvent]]]:
        """Every row and ledger event of this example, in two queries straight from the tables."""
        sql = self.session.sql
        ids = ", ".join(f"'{row.dispatch_id}'" for row in self.rows)
        stored = await sql.fetch(
            f"SELECT * FROM {sql.table('approved_action_dispatch_executions')} "
            f"WHERE dispatch_id IN ({ids})"
        )
        ledger = await sql.fetch(
            f"SELECT * FROM {sql.table('execution_events')} WHERE dispatch_id IN ({ids}) "
            "ORDER BY dispatch_id, version"
        )
        events: dict[str, list[records.ExecutionEvent]] = {row.dispatch_id: [] for row in self.rows}
        for line in ledger:
            events[line["dispatch_id"]].append(records.ExecutionEvent.from_row(line))
        return {r["dispatch_id"]: records.Execution.from_row(r) for r in stored}, events

    def _check_row(
        self,
        row: Row,
        stored: records.Execution,
        events: list[records.ExecutionEvent],
        wall_to: int,
    ) -> None:
        # The database holds what the model predicts.
        assert (
            stored.status,
            stored.version,
            stored.attempt,
            stored.takeovers,
            stored.eligible_at_ms,
        ) == (row.status, row.version, row.attempt, row.takeovers, row.eligible_at_ms)
        if row.status in (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING):
            assert (stored.lease_owner, stored.lease_token, stored.lease_expires_at_ms) == (
                row.owner,
                row.token,
                row.expires_at_ms,
            )
        if row.status is ExecutionStatus.EXECUTING:
            assert stored.started_at_ms == row.started_at_ms
        # Exactly one ledger event per status change, none for a renew.
        assert len(events) == row.events, [(e.from_status, e.to_status) for e in events]
        assert (events[0].from_status, events[0].to_status) == (None, ExecutionStatus.PENDING)
        for before, after in itertools.pairwise(events):
            assert after.from_status is before.to_status  # contiguous
            assert after.version > before.version
            assert before.to_status not in states.TERMINAL  # nothing leaves a terminal state
        for each in events:
            assert states.is_allowed(each.from_status, each.to_status), each
        assert events[-1].to_status is stored.status
        assert stored.version == events[-1].version + row.renews_since_event
        starts = [e for e in events if e.to_status is ExecutionStatus.EXECUTING]
        assert len(starts) <= 1, starts  # at most one started attempt ever executes
        # New events carry the database's clock (this machine's wall clock), not the test's.
        for each in events[self.checked_events[row.dispatch_id] :]:
            assert self.wall_from - WALL_SLACK_MS <= each.committed_at_ms <= wall_to, each
        self.checked_events[row.dispatch_id] = len(events)

    @invariant()
    def store_ledger_and_model_agree(self) -> None:
        wall_to = wall_ms() + WALL_SLACK_MS
        stored, events = self.run(self._read_all())
        for row in self.rows:
            self._check_row(row, stored[row.dispatch_id], events[row.dispatch_id], wall_to)
        self.wall_from = wall_ms()


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,  # real database round trips; their latency is not the property
    print_blob=True,
)


@contextlib.contextmanager
def machine_for(
    machine: type[M], dialect: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[type[M]]:
    """`machine` bound to one fresh database of `dialect` and a private event loop."""
    with asyncio.Runner() as runner:
        stack = contextlib.AsyncExitStack()
        try:
            harness = runner.run(
                stack.enter_async_context(stores.open_harness(dialect, tmp_path_factory))
            )
            sql = runner.run(direct_sql.DirectSql.open(harness))
            stack.push_async_callback(sql.close)  # before the database goes
            session = Session(runner=runner, harness=harness, sql=sql)
            yield type(f"{machine.__name__}_{dialect}", (machine,), {"session": session})
        finally:
            runner.run(stack.aclose())
