"""The database itself holds the execution and StepRun state machines (migration 0006)."""

from __future__ import annotations

import itertools
import sqlite3
import time

import asyncpg
import pytest

from qinglong_dispatcher.adapters.postgres import driver_errors as postgres_errors
from qinglong_dispatcher.adapters.sqlite import database as sqlite_database
from qinglong_dispatcher.domain import errors, states
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, recovery, tools
from tests.support import state_machine as sm
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS
from tests.support.stores import Harness

# Raw SQL, not the store: the writes a buggy daemon or a direct SQL session could make. The
# store's own writes pass: the whole contract suite runs with the triggers in place.
E = ExecutionStatus
S = steps.StepRunStatus


# -- executions ----------------------------------------------------------------------------


EXHAUSTS = {(E.PENDING, E.BLOCKED), (E.RETRY_WAIT, E.BLOCKED)}
"""A waiting row blocked: only by exhausting a spent budget (`attempts_exhausted`)."""
PASSAGES = {(E.PENDING, E.SUCCEEDED)}
"""A passage: only for a transactional type, as a claim and start and completion would be
written, with its receipt (tests/security/test_hostile_passages.py)."""


async def test_the_trigger_allows_exactly_the_domain_execution_row_updates(
    harness: Harness, clock: ManualClock
) -> None:
    pairs = list(itertools.product(ExecutionStatus, repeat=2))
    ids = await sm.executions_in(harness, clock, [before for before, _ in pairs])
    allowed = set()
    for dispatch_id, (before, after) in zip(ids, pairs, strict=True):
        move = sm.execution_move(before, after, clock.now_ms())
        rule = await sm.update_execution(harness, dispatch_id, move)
        if rule is None:
            allowed.add((before, after))
        elif before in states.TERMINAL:
            assert rule == "terminal", (before, after)
        elif (before, after) in EXHAUSTS:
            # Allowed only once the budget is spent, which these fresh rows' is not
            # (test_a_claim_never_goes_beyond_the_attempt_budget spends it).
            assert rule == "blocked", (before, after, rule)
        elif (before, after) in PASSAGES:
            assert rule in ("passage", "not transactional"), (before, after, rule)
        else:
            # The pair itself is refused, not some incidental column of the attempt.
            assert rule == "transition", (before, after, rule)
    assert allowed == set(states.ROW_UPDATES) - EXHAUSTS - PASSAGES


async def test_a_terminal_execution_refuses_every_change(
    harness: Harness, clock: ManualClock
) -> None:
    terminal = sorted(states.TERMINAL)
    ids = await sm.executions_in(harness, clock, terminal)
    now = clock.now_ms()
    for dispatch_id, status in zip(ids, terminal, strict=True):
        for sets in (
            sm.execution_move(E.EXECUTING, E.SUCCEEDED, now),  # settled again
            sm.execution_move(E.LEASED, E.PENDING, now),  # made to run again
            sm.execution_move(E.PENDING, E.LEASED, now),
            {"version": "version + 1", "result_code": "'rewritten'"},
            {"version": "version + 1", "updated_at_ms": str(now)},
        ):
            assert await sm.update_execution(harness, dispatch_id, sets) == "terminal", (
                status,
                sets,
            )


async def test_identity_columns_never_change(harness: Harness, clock: ManualClock) -> None:
    dispatch_id = await sm.execution_in(harness, clock, E.LEASED)
    renew = sm.renew(clock.now_ms() + LEASE_MS)
    for column, value in (
        ("dispatch_id", "'d-other'"),
        ("project_id", "'proj-other'"),
        ("max_attempts", "max_attempts + 1"),
        ("created_at_ms", "created_at_ms - 1"),
    ):
        assert (
            await sm.update_execution(harness, dispatch_id, renew | {column: value}) == "identity"
        )
    assert await sm.update_execution(harness, dispatch_id, renew) is None


async def test_the_version_must_grow(harness: Harness, clock: ManualClock) -> None:
    leased, executing = await sm.executions_in(harness, clock, [E.LEASED, E.EXECUTING])
    renew = sm.renew(clock.now_ms() + LEASE_MS)
    for dispatch_id in (leased, executing):
        for version in ("version", "version - 1", "NULL"):
            stale = renew | {"version": version}
            assert await sm.update_execution(harness, dispatch_id, stale) == "version"
        assert await sm.update_execution(harness, dispatch_id, renew) is None
    settle = sm.execution_move(E.EXECUTING, E.FAILED, clock.now_ms()) | {"version": "version"}
    assert await sm.update_execution(harness, executing, settle) == "version"


async def test_attempt_grows_by_one_on_a_claim_shrinks_by_one_on_yield_and_else_stays(
    harness: Harness, clock: ManualClock
) -> None:
    now = clock.now_ms()
    pending, retry_wait, leased, taken_over, yielded, released = await sm.executions_in(
        harness, clock, [E.PENDING, E.RETRY_WAIT, E.LEASED, E.LEASED, E.LEASED, E.LEASED]
    )
    claim = sm.execution_move(E.PENDING, E.LEASED, now)
    for dispatch_id in (pending, retry_wait):
        for wrong in ("attempt", "attempt + 2"):
            assert await sm.update_execution(harness, dispatch_id, claim | {"attempt": wrong}) == (
                "attempt"
            )
        assert await sm.update_execution(harness, dispatch_id, claim) is None
    # leased → leased: a takeover keeps the attempt (counted apart); a renew keeps attempt,
    # owner, token.
    assert await sm.update_execution(harness, taken_over, claim) == "takeover"
    assert await sm.update_execution(harness, taken_over, sm.takeover_move(now)) is None
    renew = sm.renew(now + LEASE_MS)
    # A new token is a takeover's, which counts one (refused without); a new owner a fence's.
    for column, value, rule in (
        ("lease_token", "'t-forged'", "takeover"),
        ("lease_owner", "'w-forged'", "fence"),
    ):
        assert await sm.update_execution(harness, leased, renew | {column: value}) == rule
    yield_ = sm.execution_move(E.LEASED, E.PENDING, now)
    for wrong in ("attempt", "attempt - 2", "attempt + 1"):
        assert await sm.update_execution(harness, yielded, yield_ | {"attempt": wrong}) == "attempt"
    assert await sm.update_execution(harness, yielded, yield_) is None
    retry = sm.execution_move(E.LEASED, E.RETRY_WAIT, now)
    for wrong in ("attempt - 1", "attempt + 1"):
        assert await sm.update_execution(harness, released, retry | {"attempt": wrong}) == "attempt"
    assert await sm.update_execution(harness, released, retry) is None


async def test_a_claim_never_goes_beyond_the_attempt_budget(
    harness: Harness, clock: ManualClock
) -> None:
    (spent,) = await sm.executions_in(harness, clock, [E.RETRY_WAIT], max_attempts=1)
    now = clock.now_ms()
    claim = sm.execution_move(E.RETRY_WAIT, E.LEASED, now)
    assert await sm.update_execution(harness, spent, claim) == "attempt"
    exhaust = sm.execution_move(E.RETRY_WAIT, E.BLOCKED, now)
    imitated = exhaust | {"result_code": "'operator_blocked'"}
    assert await sm.update_execution(harness, spent, imitated) == "blocked"
    assert await sm.update_execution(harness, spent, exhaust) is None


async def test_a_takeover_refunds_the_attempt_and_counts_within_its_own_bound(
    harness: Harness, clock: ManualClock
) -> None:
    # max_attempts 1: the bound is TAKEOVERS_PER_ATTEMPT takeovers (the manual clock is in the
    # past, so the database clock agrees that each lease has expired).
    (poison,) = await sm.executions_in(harness, clock, [E.LEASED], max_attempts=1)
    now = clock.now_ms()
    bound = states.max_takeovers(1)
    for wrong in (
        {"attempt": "attempt + 1"},  # a takeover spending the budget, as before
        {"attempt": "attempt - 1"},
        {"takeovers": "takeovers"},
        {"takeovers": "takeovers + 2"},
        {"started_at_ms": str(now)},
    ):
        assert await sm.update_execution(harness, poison, sm.takeover_move(now) | wrong) == (
            "takeover"
        ), wrong
    for n in range(bound):
        assert await sm.update_execution(harness, poison, sm.takeover_move(now, f"t{n}")) is None
    assert await sm.update_execution(harness, poison, sm.takeover_move(now, "t-over")) == (
        "takeover"
    )
    rows = await harness.raw(
        f"SELECT attempt, takeovers, lease_token FROM {faults.table(harness, sm.EXECUTIONS)} "
        f"WHERE dispatch_id = '{poison}'"
    )
    assert [dict(r) for r in rows] == [
        {"attempt": 1, "takeovers": bound, "lease_token": f"t{bound - 1}"}
    ]
    # Past the bound the row may only be blocked.
    exhaust = sm.execution_move(E.LEASED, E.BLOCKED, now)
    assert await sm.update_execution(harness, poison, exhaust) is None


async def test_the_takeover_count_moves_only_with_a_takeover(
    harness: Harness, clock: ManualClock
) -> None:
    pending, leased, executing = await sm.executions_in(
        harness, clock, [E.PENDING, E.LEASED, E.EXECUTING]
    )
    now = clock.now_ms()
    more = {"takeovers": "takeovers + 1"}
    claim = sm.execution_move(E.PENDING, E.LEASED, now)
    assert await sm.update_execution(harness, pending, claim | more) == "attempt"
    renew = {"version": "version + 1", "lease_expires_at_ms": str(now + LEASE_MS)}
    assert await sm.update_execution(harness, executing, renew | more) == "takeover"
    yield_ = sm.execution_move(E.LEASED, E.PENDING, now)
    assert await sm.update_execution(harness, leased, yield_ | more) == "takeover"
    # Counted without a new token, it is the claimant taking its own expired lease again: a
    # takeover, admitted only as one (never on a live lease: the test below).
    assert await sm.update_execution(
        harness, leased, renew | more | {"attempt": "attempt + 1"}
    ) == ("takeover")
    assert await sm.update_execution(harness, leased, renew | more) is None


async def test_a_live_lease_is_never_taken_over(harness: Harness, clock: ManualClock) -> None:
    leased = await sm.execution_in(harness, clock, E.LEASED)
    # An hour past the wall clock: live on the database clock, within its one-day bound.
    renew = sm.renew(int(time.time() * 1000) + 3_600_000)
    assert await sm.update_execution(harness, leased, renew) is None
    takeover = sm.takeover_move(clock.now_ms())
    if harness.dialect == "sqlite":
        assert await sm.update_execution(harness, leased, takeover) == "takeover"
        return
    # PostgreSQL's fence answers before the state machine: a live lease is its holder's alone.
    row = f"SELECT * FROM {faults.table(harness, sm.EXECUTIONS)} WHERE dispatch_id = '{leased}'"
    before = await harness.raw(row)
    with pytest.raises(asyncpg.PostgresError) as refused:
        await sm.update_execution(harness, leased, takeover)
    assert refused.value.sqlstate == "QLF02"
    assert await harness.raw(row) == before


async def test_only_a_handler_wait_is_woken_and_only_its_due_time_moves(
    harness: Harness, clock: ManualClock
) -> None:
    (waiting, other, fresh) = await sm.executions_in(harness, clock, [E.PENDING] * 3)
    now = clock.now_ms()
    wake = sm.execution_move(E.PENDING, E.PENDING, now)
    for wrong in (
        {"eligible_at_ms": "eligible_at_ms"},  # not earlier
        {"eligible_at_ms": "eligible_at_ms + 1"},
        {"attempt": "attempt + 1"},
        {"takeovers": "takeovers + 1"},
        {"result_code": "NULL"},
        {"retry_at_ms": str(now)},
        {"lease_owner": "'w-forged'"},
        {"completed_at_ms": str(now)},
    ):
        assert await sm.update_execution(harness, waiting, wake | wrong) == "wake", wrong
    assert await sm.update_execution(harness, waiting, wake) is None
    # A row pending for another reason (a shutdown yield) is not a handler wait.
    table = faults.table(harness, sm.EXECUTIONS)
    claim = sm.set_list(sm.execution_move(E.PENDING, E.LEASED, now), harness.dialect)
    for dispatch_id, code in ((other, "'shutdown'"), (fresh, "NULL")):
        await harness.raw(f"UPDATE {table} SET {claim} WHERE dispatch_id = '{dispatch_id}'")
        back = sm.execution_move(E.LEASED, E.PENDING, now) | {"result_code": code}
        assert await sm.update_execution(harness, dispatch_id, back) is None
        assert await sm.update_execution(harness, dispatch_id, wake) == "wake"


async def test_a_started_identity_never_changes(harness: Harness, clock: ManualClock) -> None:
    dispatch_id = await sm.execution_in(harness, clock, E.EXECUTING)
    now = clock.now_ms()
    renew = sm.renew(now + LEASE_MS)
    complete = sm.execution_move(E.EXECUTING, E.SUCCEEDED, now)
    for column, value, rule in (
        ("attempt", "attempt + 1", "attempt"),
        ("attempt", "attempt - 1", "attempt"),
        ("lease_owner", "'w-forged'", "fence"),
        ("lease_token", "'t-forged'", "fence"),
        ("started_at_ms", "started_at_ms + 1", "fence"),
    ):
        for sets in (renew, complete):
            assert await sm.update_execution(harness, dispatch_id, sets | {column: value}) == rule
    assert await sm.update_execution(harness, dispatch_id, renew) is None
    assert await sm.update_execution(harness, dispatch_id, complete) is None


async def test_the_start_barrier_alone_sets_started_at_and_keeps_the_lease_holder(
    harness: Harness, clock: ManualClock
) -> None:
    leased, released = await sm.executions_in(harness, clock, [E.LEASED, E.LEASED])
    now = clock.now_ms()
    renew = {"version": "version + 1", "started_at_ms": str(now)}
    assert await sm.update_execution(harness, leased, renew) == "fence"
    release = sm.execution_move(E.LEASED, E.RETRY_WAIT, now) | {"started_at_ms": str(now)}
    assert await sm.update_execution(harness, released, release) == "fence"
    takeover = sm.takeover_move(now) | {"started_at_ms": str(now)}
    assert await sm.update_execution(harness, leased, takeover) == "takeover"
    start = sm.execution_move(E.LEASED, E.EXECUTING, now)
    for column, value, rule in (
        ("attempt", "attempt + 1", "attempt"),
        ("lease_owner", "'w-forged'", "fence"),
        ("lease_token", "'t-forged'", "fence"),
    ):
        assert await sm.update_execution(harness, leased, start | {column: value}) == rule
    # The start barrier grants a fresh lease: the expiry may move with it.
    assert await sm.update_execution(harness, leased, start) is None


async def test_an_execution_is_inserted_only_pending_at_version_zero(
    harness: Harness, clock: ManualClock
) -> None:
    # The dispatch already has its row: the trigger refuses before the primary key would.
    dispatch_id = await sm.execution_in(harness, clock, E.PENDING)
    table = faults.table(harness, sm.EXECUTIONS)
    fresh = {
        "dispatch_id": f"'{dispatch_id}'",
        "project_id": "'proj-1'",
        "max_attempts": "5",
        "created_at_ms": "1",
        "updated_at_ms": "1",
        "status": "'pending'",
        "version": "0",
        "attempt": "0",
        "eligible_at_ms": str(clock.now_ms()),
    }
    for change in (
        {"status": "'leased'", "lease_owner": "'w1'", "lease_token": "'t1'"},
        {"version": "1"},
        {"attempt": "1"},
        {"takeovers": "1"},
        {"lease_owner": "'w1'", "lease_token": "'t1'", "lease_expires_at_ms": "1"},
        {"started_at_ms": "1"},
        {"result_code": "'forged'"},
        {"status": "'succeeded'", "eligible_at_ms": "NULL", "completed_at_ms": "1"},
    ):
        values = fresh | change
        sql = (
            f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join(values.values())}) "
            "RETURNING version"
        )
        assert await sm.refusal(harness, sql) == "insert", change


async def test_a_refusal_leaves_the_adapter_as_transition_refused(
    harness: Harness, clock: ManualClock
) -> None:
    dispatch_id = await sm.execution_in(harness, clock, E.SUCCEEDED)
    yield_ = sm.execution_move(E.LEASED, E.PENDING, clock.now_ms())
    with pytest.raises((sqlite3.IntegrityError, asyncpg.PostgresError)) as caught:
        await harness.raw(
            f"UPDATE {faults.table(harness, sm.EXECUTIONS)} "
            f"SET {sm.set_list(yield_, harness.dialect)} "
            f"WHERE dispatch_id = '{dispatch_id}'"
        )
    translated: errors.StoreError | errors.ApprovalError
    if isinstance(caught.value, sqlite3.Error):
        translated = sqlite_database.translate(caught.value)
    else:
        translated = postgres_errors.translate(caught.value)
    assert isinstance(translated, errors.TransitionRefused)
    assert translated.code == "transition_refused"
    assert "terminal" in str(translated)
    assert dispatch_id not in str(translated)


# -- StepRuns ------------------------------------------------------------------------------


async def test_the_trigger_allows_exactly_the_domain_step_run_row_updates(
    harness: Harness, clock: ManualClock
) -> None:
    pairs = list(itertools.product(steps.StepRunStatus, repeat=2))
    ids = await sm.step_runs_in(harness, clock, [before for before, _ in pairs])
    allowed = set()
    for step_run_id, (before, after) in zip(ids, pairs, strict=True):
        rule = await sm.update_step_run(harness, step_run_id, sm.step_move(after, clock.now_ms()))
        if rule is None:
            allowed.add((before, after))
        elif before in steps.TERMINAL:
            assert rule == "terminal", (before, after)
        else:
            assert rule == "transition", (before, after, rule)
    # The administrator (PostgreSQL) or the file's owner (SQLite) may re-arm a lost StepRun.
    assert allowed == set(steps.ROW_UPDATES)


async def test_a_step_run_keeps_its_binding_grows_its_version_and_never_leaves_an_end(
    harness: Harness, clock: ManualClock
) -> None:
    ready, succeeded, failed = await sm.step_runs_in(
        harness, clock, [S.READY, S.SUCCEEDED, S.FAILED]
    )
    start = sm.step_move(S.RUNNING, clock.now_ms())
    for column, value in (
        ("step_run_id", "'s-other'"),
        ("run_id", "'r-other'"),
        ("project_id", "'proj-other'"),
        ("step_kind", "'other'"),
        ("tool_id", "'builtin.other'"),
        ("tool_version", "2"),
        ("definition_digest", f"'{'e' * 64}'"),
        ("action_type", "'run.create'"),
        ("action_ref", "'act-forged'"),
        ("action_digest", f"'{'e' * 64}'"),
        ("approval_request_id", "'a-forged'"),
        ("binding_digest", f"'{'e' * 64}'"),
        ("created_at_ms", "0"),
    ):
        assert await sm.update_step_run(harness, ready, start | {column: value}) == "identity"
    for version in ("version", "version - 1", "NULL"):
        assert await sm.update_step_run(harness, ready, start | {"version": version}) == "version"
    for ended in (succeeded, failed):
        for after in steps.StepRunStatus:
            assert await sm.update_step_run(harness, ended, sm.step_move(after, 1)) == "terminal"
    assert await sm.update_step_run(harness, ready, start) is None


async def test_a_step_run_is_inserted_only_ready_or_waiting_at_version_one(
    harness: Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(harness, clock)
    refused: list[tuple[steps.StepRunStatus, dict[str, object]]] = [
        (S.RUNNING, {}),
        (S.SUCCEEDED, {}),
        (S.LOST, {}),
        (S.READY, {"version": 2}),
        (S.READY, {"result_code": "forged"}),
    ]
    for i, (status, changes) in enumerate(refused):
        row = sm.new_step_run(f"s-bad-{i}", run.run_id, status, None, clock.now_ms()) | changes
        columns = ", ".join(row)
        values = ", ".join(sm.literal(v) for v in row.values())
        sql = (
            f"INSERT INTO {faults.table(harness, 'step_runs')} ({columns}) VALUES ({values}) "
            "RETURNING version"
        )
        assert await sm.refusal(harness, sql) == "insert", (status, changes)
    ok = sm.new_step_run("s-good", run.run_id, S.READY, None, clock.now_ms())
    await recovery.insert_row(harness, "step_runs", ok)
