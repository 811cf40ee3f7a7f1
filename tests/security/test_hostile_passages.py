"""Passages (a transactional action's claim, start, effect, receipt and completion in one
transaction, `pending → succeeded`) attacked from plain logins holding only their documented
roles (PostgreSQL: the runtime and operator logins of docs/security.md; SQLite: a plain
connection to the file): the edge for a type not marked transactional, without its receipt,
outside the dispatch's window and under a freeze are each refused by the database, nothing
changed; the runtime's own passage with its receipt commits, one ledger line. SQLite checks
the receipt with a foreign key deferred to the commit, so its edge is refused on a
connection that does not enforce foreign keys and one that does not name the receipt."""

from __future__ import annotations

import pathlib
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.domain import freezes, ids
from tests.support import faults, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.targets import TARGET_TYPE, submit_change
from tests.support.windows import submit_windowed, window_policy

HOUR_MS = 3_600_000
PROOF = "passage-proof"
NOT_TRANSACTIONAL = {
    "postgres": "QLT01",
    "sqlite": "qinglong:transition_refused: not transactional",
}
NO_RECEIPT = {"postgres": "QLT01", "sqlite": "FOREIGN KEY constraint failed"}
UNNAMED = "qinglong:transition_refused: a passage commits with its receipt"
OUTSIDE = {"postgres": "QLW01", "sqlite": "qinglong:window_refused: outside its execution window"}
FROZEN = {"postgres": "QLZ01", "sqlite": "qinglong:freeze_refused: a freeze covers this dispatch"}


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides windows and freezes."""
    return ManualClock(int(time.time() * 1000))


def _t(h: stores.Harness, name: str) -> str:
    return faults.table(h, name)


async def _snapshot(h: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """The attacked row, its ledger lines, and any Run or receipt of its dispatch."""
    return (
        await h.raw(
            f"SELECT * FROM {_t(h, 'approved_action_dispatch_executions')} "
            f"WHERE dispatch_id = '{dispatch_id}'"
        ),
        await h.scalar(
            f"SELECT count(*) FROM {_t(h, 'execution_events')} WHERE dispatch_id = '{dispatch_id}'"
        ),
        await h.scalar(
            f"SELECT count(*) FROM {_t(h, 'runs')} WHERE idempotency_key = '{dispatch_id}'"
        ),
        await h.scalar(
            f"SELECT count(*) FROM {_t(h, 'approved_run_action_receipts')} "
            f"WHERE dispatch_id = '{dispatch_id}'"
        ),
    )


def _passage(
    h: stores.Harness,
    dispatch_id: str,
    now_ms: int,
    *,
    receipt: bool = True,
    named: bool = True,
) -> list[str]:
    """What a passage writes, by hand: the row once, `pending → succeeded`, then the
    dispatch's Run and receipt (their guards admit them once the row holds the dispatch; on
    PostgreSQL they present the proof it holds now); the row names its receipt."""
    postgres = h.dialect == "postgres"
    proof = f", lease_proof = '{PROOF}'" if postgres else ""
    if named:
        proof += ", passage_receipt = dispatch_id"
    row = (
        f"UPDATE {_t(h, 'approved_action_dispatch_executions')} SET status = 'succeeded', "
        "version = version + 1, attempt = attempt + 1, lease_owner = 'w1', lease_token = 'w1', "
        f"started_at_ms = {now_ms}, completed_at_ms = {now_ms}, result_mutation_id = 'm-1', "
        f"result_code = 'run_created', eligible_at_ms = NULL, updated_at_ms = {now_ms}{proof} "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )
    proof_column, proof_value = (", lease_proof", f", '{PROOF}'") if postgres else ("", "")
    run = (
        f"INSERT INTO {_t(h, 'runs')} (run_id, project_id, task_id, task_revision, "
        "executor_type, priority, status, trigger_type, execution_origin, execution_owner, "
        "request_id, idempotency_key, accepted_at_ms, version, event_seq, created_at_ms, "
        f"updated_at_ms{proof_column}) SELECT 'r-{dispatch_id}', d.project_id, 't', 1, 'shell', "
        "0, 'queued', 'approved_action', 'system', 'runtime', d.approval_request_id, "
        f"d.dispatch_id, {now_ms}, 1, 1, {now_ms}, {now_ms}{proof_value} "
        f"FROM {_t(h, 'approved_action_dispatches')} AS d WHERE d.dispatch_id = '{dispatch_id}'"
    )
    receipt_sql = (
        f"INSERT INTO {_t(h, 'approved_run_action_receipts')} (dispatch_id, schema_version, "
        "approval_request_id, project_id, action_type, action_digest, execution_attempt, "
        "execution_version, started_at_ms, idempotency_key, outcome, result_code, "
        f"resource_type, resource_id, created_at_ms, evidence_digest{proof_column}) "
        "SELECT d.dispatch_id, 1, d.approval_request_id, d.project_id, d.action_type, "
        f"d.action_digest, e.attempt, e.version, {now_ms}, d.dispatch_id, "
        f"'succeeded', 'run_created', 'run', 'r-{dispatch_id}', {now_ms}, '{'e' * 64}'"
        f"{proof_value} FROM {_t(h, 'approved_action_dispatches')} AS d "
        f"JOIN {_t(h, 'approved_action_dispatch_executions')} AS e "
        f"ON e.dispatch_id = d.dispatch_id WHERE d.dispatch_id = '{dispatch_id}'"
    )
    return [row, run, receipt_sql] if receipt else [row, run]


async def _as(
    h: stores.Harness, login: str, statements: list[str], *, foreign_keys: bool = True
) -> None:
    """The statements in one transaction, as `login` (SQLite: a plain connection to the file,
    enforcing foreign keys as the product's do unless told not to); driver errors reach the
    caller, the transaction undone."""
    if h.dialect == "postgres":
        database = str(await h.scalar("SELECT current_database()"))
        url = {"runtime": stores.runtime_url, "operator": stores.operator_url}[login]
        await _in_one_transaction(url(database), statements)
        return
    path = pathlib.Path(
        str(await h.scalar("SELECT file FROM pragma_database_list WHERE name = 'main'"))
    )

    def body() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        try:
            conn.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql in statements:
                    conn.execute(sql)
                conn.execute("COMMIT")  # a deferred key is checked here
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()

    await anyio.to_thread.run_sync(body)


async def _in_one_transaction(url: str, statements: list[str]) -> None:
    """The statements in one transaction on a connection of `url`'s login."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            for sql in statements:
                await conn.execute(sql)
    finally:
        await conn.close()


async def _refused(
    h: stores.Harness, login: str, statements: list[str], *, foreign_keys: bool = True
) -> str:
    """The SQLSTATE (PostgreSQL) or the file's message (SQLite) that refused the transaction."""
    if h.dialect == "postgres":
        with pytest.raises(asyncpg.PostgresError) as caught_pg:
            await _as(h, login, statements)
        return str(caught_pg.value.sqlstate)
    with pytest.raises(sqlite3.IntegrityError) as caught:
        await _as(h, login, statements, foreign_keys=foreign_keys)
    return str(caught.value)


async def _mark_transactional(h: stores.Harness, action_type: str) -> None:
    """The owner marks an action type transactional (the test action, to attack its window and
    freeze through the edge)."""
    await h.raw(
        f"INSERT INTO {_t(h, 'transactional_action_types')} (action_type) VALUES ('{action_type}')"
    )


async def test_the_runtimes_passage_with_its_receipt_commits_as_one_ledger_line(
    harness: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, now, 1)
    dispatch_id = consumed.dispatch_id

    await _as(harness, "runtime", _passage(harness, dispatch_id, now.ms))

    (row,) = await harness.raw(
        "SELECT status, attempt, version FROM "
        f"{_t(harness, 'approved_action_dispatch_executions')} WHERE dispatch_id = '{dispatch_id}'"
    )
    assert (row["status"], row["attempt"], row["version"]) == ("succeeded", 1, 1)
    lines = await harness.raw(
        f"SELECT from_status, to_status, lease_owner, mutation_id FROM "
        f"{_t(harness, 'execution_events')} WHERE dispatch_id = '{dispatch_id}' ORDER BY version"
    )
    assert [(line["from_status"], line["to_status"]) for line in lines] == [
        (None, "pending"),
        ("pending", "succeeded"),
    ]
    assert (lines[1]["lease_owner"], lines[1]["mutation_id"]) == ("w1", "m-1")


async def test_no_login_takes_the_passage_for_a_type_not_marked_transactional(
    harness: stores.Harness, now: ManualClock
) -> None:
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    before = await _snapshot(harness, dispatch_id)
    # The whole passage, its Run and receipt included, so that only the type can refuse it.
    passage = _passage(harness, dispatch_id, now.ms)

    assert await _refused(harness, "runtime", passage) == NOT_TRANSACTIONAL[harness.dialect]
    if harness.dialect == "postgres":
        # Nor an operator for a transactional type: the passage is the runtime's alone (the
        # operator holds no grant to write a claim's columns).
        (run,) = await submit_runs(harness.approver_store, now, 1)
        run_before = await _snapshot(harness, run.dispatch_id)
        passage = _passage(harness, run.dispatch_id, now.ms)
        assert await _refused(harness, "operator", passage) == "42501"
        assert await _snapshot(harness, run.dispatch_id) == run_before
    assert await _snapshot(harness, dispatch_id) == before


async def test_a_page_of_passages_with_one_row_of_a_type_not_marked_transactional_is_refused(
    harness: stores.Harness, now: ManualClock
) -> None:
    # One statement passes a run.create row and a row of a type not marked transactional: the
    # whole statement is refused, its transactional row with it, whichever row is checked.
    (run,) = await submit_runs(harness.approver_store, now, 1)
    other = await submit_change(harness.approver_store, now, "act-1", None)
    before = [await _snapshot(harness, d) for d in (run.dispatch_id, other)]
    first, *effects = _passage(harness, run.dispatch_id, now.ms)
    _, *other_effects = _passage(harness, other, now.ms)
    page = first.replace(
        f"WHERE dispatch_id = '{run.dispatch_id}'",
        f"WHERE dispatch_id IN ('{run.dispatch_id}', '{other}')",
    )

    refusal = await _refused(harness, "runtime", [page, *effects, *other_effects])
    assert refusal == NOT_TRANSACTIONAL[harness.dialect]
    assert [await _snapshot(harness, d) for d in (run.dispatch_id, other)] == before


@pytest.mark.postgres
async def test_the_apis_login_granted_the_runtime_by_mistake_cannot_pass_a_row(
    pg: stores.Harness, now: ManualClock
) -> None:
    # The API's login as itself is nobody (migration 0015): granted the runtime's role by an
    # administrator's mistake and become it, it holds the runtime's grants but does not act as
    # the runtime, and a passage is the runtime's alone.
    login = stores.session_login("api_runtime")
    await stores.create_login(login, "qinglong_api")
    await pg.raw(f"ALTER ROLE {login} NOINHERIT")
    await pg.raw(f"GRANT qinglong_runtime TO {login}")
    try:
        (run,) = await submit_runs(pg.approver_store, now, 1)
        before = await _snapshot(pg, run.dispatch_id)
        database = str(await pg.scalar("SELECT current_database()"))
        statements = ["SET LOCAL ROLE qinglong_runtime", *_passage(pg, run.dispatch_id, now.ms)]
        with pytest.raises(asyncpg.PostgresError) as caught:
            await _in_one_transaction(stores.pg_url(database, login=login), statements)
        assert caught.value.sqlstate == "QLT01"
        assert await _snapshot(pg, run.dispatch_id) == before
    finally:
        await stores.drop_roles(login)


async def test_a_passage_without_its_receipt_is_refused(
    harness: stores.Harness, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, now, 1)
    before = await _snapshot(harness, consumed.dispatch_id)

    refusal = await _refused(
        harness, "runtime", _passage(harness, consumed.dispatch_id, now.ms, receipt=False)
    )

    assert refusal == NO_RECEIPT[harness.dialect]
    assert await _snapshot(harness, consumed.dispatch_id) == before


async def test_a_passage_outside_its_window_is_refused(
    harness: stores.Harness, now: ManualClock
) -> None:
    await _mark_transactional(harness, TARGET_TYPE)
    await window_policy(harness, delay_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    before = await _snapshot(harness, dispatch_id)

    refusal = await _refused(harness, "runtime", _passage(harness, dispatch_id, now.ms))

    assert refusal == OUTSIDE[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


async def test_a_passage_under_a_freeze_is_refused(
    harness: stores.Harness, now: ManualClock
) -> None:
    await _mark_transactional(harness, TARGET_TYPE)
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    unfrozen = await submit_change(harness.approver_store, now, "act-2", None)
    # The same passage of an unfrozen dispatch of the type takes: the freeze refused, nothing
    # else.
    await _as(harness, "runtime", _passage(harness, unfrozen, now.ms))
    owner = await harness.owner()
    await owner.add_freeze(
        freezes.NewFreeze(from_ms=now.ms - 1000, until_ms=now.ms + HOUR_MS, reason="release")
    )
    before = await _snapshot(harness, dispatch_id)

    refusal = await _refused(harness, "runtime", _passage(harness, dispatch_id, now.ms))

    assert refusal == FROZEN[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


@pytest.mark.parametrize("attack", ["foreign_keys_off", "receipt_unnamed"])
async def test_a_sqlite_passage_names_its_receipt_under_enforced_foreign_keys(
    edge: stores.Harness, now: ManualClock, attack: str
) -> None:
    """The file's check of the receipt is a foreign key deferred to the commit: the edge is
    refused where it would not be checked (a session with foreign keys off) and where it names
    no receipt to check, although the Run and the receipt are written too."""
    (consumed,) = await submit_runs(edge.approver_store, now, 1)
    before = await _snapshot(edge, consumed.dispatch_id)
    named = attack != "receipt_unnamed"
    passage = _passage(edge, consumed.dispatch_id, now.ms, named=named)

    refusal = await _refused(edge, "runtime", passage, foreign_keys=attack != "foreign_keys_off")

    assert refusal == UNNAMED
    assert await _snapshot(edge, consumed.dispatch_id) == before


async def test_a_passage_names_its_receipt_on_its_row_and_nothing_else_does(
    harness: stores.Harness, now: ManualClock
) -> None:
    """A passage that writes its receipt but does not name it on its row is refused, and no
    other change of a row names one (the started row's completion included)."""
    (consumed,) = await submit_runs(harness.approver_store, now, 1)
    before = await _snapshot(harness, consumed.dispatch_id)
    unnamed = _passage(harness, consumed.dispatch_id, now.ms, named=False)

    refusal = await _refused(harness, "runtime", unnamed)

    assert refusal == ("QLT01" if harness.dialect == "postgres" else UNNAMED)
    assert await _snapshot(harness, consumed.dispatch_id) == before
    # A waiting row naming a receipt: refused by the state machine.
    naming = (
        f"UPDATE {_t(harness, 'approved_action_dispatch_executions')} "
        f"SET passage_receipt = dispatch_id WHERE dispatch_id = '{consumed.dispatch_id}'"
    )
    if harness.dialect == "postgres":
        assert await _refused(harness, "runtime", [naming]) == "QLT01"
    else:
        with pytest.raises(sqlite3.IntegrityError, match="qinglong:transition_refused"):
            await _as(harness, "runtime", [naming])
    assert await _snapshot(harness, consumed.dispatch_id) == before


async def test_a_started_rows_completion_names_no_receipt(
    harness: stores.Harness, clock: ManualClock
) -> None:
    """The runtime completing a started row as it may, but naming a receipt as a passage
    does: refused (`passage_receipt` is the passage's alone), nothing changed."""
    await submit_runs(harness.approver_store, clock, 1)
    dispatch, identity = await started_execution(harness, clock)
    proof = f", lease_proof = '{ids.lease_proof(identity.token)}'"
    complete = (
        f"UPDATE {_t(harness, 'approved_action_dispatch_executions')} SET status = 'succeeded', "
        "version = version + 1, result_mutation_id = 'm-1', result_code = 'run_created', "
        f"completed_at_ms = {clock.ms}, updated_at_ms = {clock.ms}"
        f"{proof if harness.dialect == 'postgres' else ''}"
    )
    where = f" WHERE dispatch_id = '{dispatch.dispatch_id}'"
    before = await _snapshot(harness, dispatch.dispatch_id)

    refusal = await _refused(
        harness, "runtime", [complete + ", passage_receipt = dispatch_id" + where]
    )

    assert refusal == (
        "QLT01" if harness.dialect == "postgres" else "qinglong:transition_refused: fence"
    )
    assert await _snapshot(harness, dispatch.dispatch_id) == before
    await _as(harness, "runtime", [complete + where])  # the same completion, naming none
