"""Execution windows attacked from plain logins holding only their documented roles
(PostgreSQL: the runtime and operator logins of docs/security.md; SQLite: a plain connection
to the file): a lease before the window opens, a start barrier after it closes, the end of a
wait as `window_expired` while the window is open or by a login that is not the runtime, and a
window moved by hand are each refused by the database, nothing changed."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from tests.support import faults, refusals, stores
from tests.support.clock import ManualClock
from tests.support.targets import submit_change
from tests.support.windows import submit_windowed, window_policy

HOUR_MS = 3_600_000
OUTSIDE = {"postgres": "QLW01", "sqlite": "qinglong:window_refused: outside its execution window"}


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the windows."""
    return ManualClock(int(time.time() * 1000))


def _executions(h: stores.Harness) -> str:
    return faults.table(h, "approved_action_dispatch_executions")


async def _snapshot(h: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """The attacked row and its ledger lines."""
    row = await h.raw(f"SELECT * FROM {_executions(h)} WHERE dispatch_id = '{dispatch_id}'")
    events = await h.scalar(
        f"SELECT count(*) FROM {faults.table(h, 'execution_events')} "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )
    return row[0], events


def _lease_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    """The runtime's own lease of a waiting row, written by hand (what `lease_page` writes)."""
    expires = now_ms + HOUR_MS
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_executions(h)} SET status = 'leased', version = version + 1, "
        "attempt = attempt + 1, lease_owner = 'mallory', lease_token = 'mallory', "
        f"lease_expires_at_ms = {expires}, eligible_at_ms = {expires}, "
        f"updated_at_ms = {now_ms}{proof} WHERE dispatch_id = '{dispatch_id}'"
    )


def _start_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    """The holder's own start barrier, written by hand (what `start_row` writes)."""
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_executions(h)} SET status = 'executing', version = version + 1, "
        f"started_at_ms = {now_ms}, eligible_at_ms = NULL, updated_at_ms = {now_ms}{proof} "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )


def _expire_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    """The reconcile pass's end of a wait past its window, written by hand."""
    return (
        f"UPDATE {_executions(h)} SET status = 'cancelled', version = version + 1, "
        "eligible_at_ms = NULL, retry_at_ms = NULL, result_code = 'window_expired', "
        f"completed_at_ms = {now_ms}, updated_at_ms = {now_ms} "
        f"WHERE dispatch_id = '{dispatch_id}'"
    )


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


async def _as(h: stores.Harness, login: str, sql: str) -> None:
    if h.dialect == "postgres":
        url = {"runtime": stores.runtime_url, "operator": stores.operator_url}[login]
        await stores.as_login(url(await _database(h)), sql)
    else:
        await h.raw(sql)


async def _refused_as(h: stores.Harness, login: str, sql: str) -> str:
    if h.dialect == "postgres":
        url = {"runtime": stores.runtime_url, "operator": stores.operator_url}[login]
        return await refusals.sqlstate_as(url(await _database(h)), sql)
    return await refusals.sqlite_abort(h, sql)


async def test_a_login_cannot_lease_before_the_window_opens(
    harness: stores.Harness, now: ManualClock
) -> None:
    unwindowed = await submit_change(harness.approver_store, now, "act-0", None)
    await window_policy(harness, delay_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    before = await _snapshot(harness, dispatch_id)
    lease = _lease_sql(harness, now.ms, dispatch_id)

    refusal = await _refused_as(harness, "runtime", lease)

    assert refusal == OUTSIDE[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before
    # The same statement on a row without a window takes: the window refused, nothing else.
    await _as(harness, "runtime", _lease_sql(harness, now.ms, unwindowed))


async def test_a_login_cannot_start_after_the_window_closes(
    harness: stores.Harness, now: ManualClock
) -> None:
    await window_policy(harness, window_ms=1500)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    other = await submit_windowed(harness, now, "act-2", None)
    # Leased inside the window by the runtime's own statement: admitted.
    await _as(harness, "runtime", _lease_sql(harness, now.ms, dispatch_id))
    await _as(harness, "runtime", _lease_sql(harness, now.ms, other))
    await _as(harness, "runtime", _start_sql(harness, now.ms, other))
    await anyio.sleep(1.6)
    now.ms = int(time.time() * 1000)
    before = await _snapshot(harness, dispatch_id)

    refusal = await _refused_as(harness, "runtime", _start_sql(harness, now.ms, dispatch_id))

    assert refusal == OUTSIDE[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


async def test_a_wait_ends_window_expired_only_past_its_window(
    harness: stores.Harness, now: ManualClock
) -> None:
    await window_policy(harness, window_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    before = await _snapshot(harness, dispatch_id)

    refusal = await _refused_as(harness, "runtime", _expire_sql(harness, now.ms, dispatch_id))

    expected = {"postgres": "QLW01", "sqlite": "qinglong:window_refused: the window is still open"}
    assert refusal == expected[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


@pytest.mark.postgres
async def test_only_the_runtime_ends_a_wait_past_its_window(
    pg: stores.Harness, now: ManualClock
) -> None:
    await window_policy(pg, window_ms=1000)
    dispatch_id = await submit_windowed(pg, now, "act-1", None)
    await anyio.sleep(1.1)
    now.ms = int(time.time() * 1000)
    before = await _snapshot(pg, dispatch_id)

    refusal = await _refused_as(pg, "operator", _expire_sql(pg, now.ms, dispatch_id))

    # An operator's end of a wait is a cancel, and a cancel is audited first (QLI02): no login
    # but the runtime writes an expiry without its own audit row.
    assert refusal == "QLI02"
    assert await _snapshot(pg, dispatch_id) == before
    # The runtime's own statement, the same, takes.
    await _as(pg, "runtime", _expire_sql(pg, now.ms, dispatch_id))


async def test_a_window_never_moves(harness: stores.Harness, now: ManualClock) -> None:
    await window_policy(harness, delay_ms=HOUR_MS)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    before = await _snapshot(harness, dispatch_id)
    # The runtime's own lease, opening the window on the way.
    moved = _lease_sql(harness, now.ms, dispatch_id).replace(
        "SET status", "SET not_before_ms = 0, status"
    )

    refusal = await _refused_as(harness, "runtime", moved)

    expected = {"postgres": "QLI01", "sqlite": "qinglong:window_refused: a window never changes"}
    assert refusal == expected[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


async def test_a_claim_past_its_window_is_ended_only_once_its_lease_ran_out(
    harness: stores.Harness, now: ManualClock
) -> None:
    await window_policy(harness, window_ms=1500)
    dispatch_id = await submit_windowed(harness, now, "act-1", None)
    # Leased inside the window for an hour by the runtime's own statement: admitted.
    await _as(harness, "runtime", _lease_sql(harness, now.ms, dispatch_id))
    await anyio.sleep(1.6)
    now.ms = int(time.time() * 1000)
    before = await _snapshot(harness, dispatch_id)

    refusal = await _refused_as(harness, "runtime", _expire_sql(harness, now.ms, dispatch_id))

    expected = {
        "postgres": "QLF02",
        "sqlite": "qinglong:transition_refused: a claimed row ends only past its window and lease",
    }
    assert refusal == expected[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before
    # Nor is a claimed row anyone's to cancel by another name, window or not.
    cancel = _expire_sql(harness, now.ms, dispatch_id).replace("'window_expired'", "'operator'")
    login = "operator" if harness.dialect == "postgres" else "runtime"
    refused = await _refused_as(harness, login, cancel)
    assert (
        refused
        == {"postgres": "QLT01", "sqlite": "qinglong:transition_refused: transition"}[
            harness.dialect
        ]
    )
    assert await _snapshot(harness, dispatch_id) == before
