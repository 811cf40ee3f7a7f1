"""Change freezes attacked from plain logins holding only their documented roles (PostgreSQL:
the runtime, operator and viewer logins of docs/security.md, and a requester who is also an
operator; SQLite: a plain connection to the file): a freeze written or ended by a login that is
not the schema's owner, a freeze changed but by its end, a lift by the dispatch's requester or
by a viewer, and a lease or start of a covered dispatch are each refused by the database,
nothing changed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from qinglong_dispatcher.domain import freezes
from tests.support import faults, refusals, stores
from tests.support.clock import ManualClock
from tests.support.targets import submit_change

HOUR_MS = 3_600_000
REQUESTER = stores.session_login("frz_requester")
VIEWER = stores.session_login("frz_viewer")


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock decides the freezes."""
    return ManualClock(int(time.time() * 1000))


@pytest.fixture
async def _logins(pg: stores.Harness) -> None:
    """The requester who is also an operator, and a viewer (made again per test: idempotent)."""
    await stores.create_login(
        REQUESTER, "qinglong_approver", "qinglong_self_approver", "qinglong_operator"
    )
    await stores.create_login(VIEWER, "qinglong_viewer")


def _t(h: stores.Harness, name: str) -> str:
    return faults.table(h, name)


async def _rows(h: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """The freezes, the lifts, the attacked execution and its ledger."""
    return (
        await h.raw(f"SELECT * FROM {_t(h, 'freezes')} ORDER BY freeze_id"),
        await h.raw(f"SELECT * FROM {_t(h, 'freeze_lifts')} ORDER BY freeze_id"),
        await h.raw(
            f"SELECT * FROM {_t(h, 'approved_action_dispatch_executions')} "
            f"WHERE dispatch_id = '{dispatch_id}'"
        ),
        await h.scalar(
            f"SELECT count(*) FROM {_t(h, 'execution_events')} WHERE dispatch_id = '{dispatch_id}'"
        ),
    )


async def _freeze(h: stores.Harness, now: ManualClock) -> int:
    owner = await h.owner()
    freeze = await owner.add_freeze(
        freezes.NewFreeze(from_ms=now.ms - 1000, until_ms=now.ms + HOUR_MS, reason="release")
    )
    return freeze.freeze_id


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


def _lease_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    expires = now_ms + HOUR_MS
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_t(h, 'approved_action_dispatch_executions')} SET status = 'leased', "
        "version = version + 1, attempt = attempt + 1, lease_owner = 'mallory', "
        f"lease_token = 'mallory', lease_expires_at_ms = {expires}, eligible_at_ms = {expires}, "
        f"updated_at_ms = {now_ms}{proof} WHERE dispatch_id = '{dispatch_id}'"
    )


def _start_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_t(h, 'approved_action_dispatch_executions')} SET status = 'executing', "
        f"version = version + 1, started_at_ms = {now_ms}, eligible_at_ms = NULL, "
        f"updated_at_ms = {now_ms}{proof} WHERE dispatch_id = '{dispatch_id}'"
    )


async def _refused_as(h: stores.Harness, url_of: Any, sql: str) -> str:
    if h.dialect == "postgres":
        return await refusals.sqlstate_as(url_of(await _database(h)), sql)
    return await refusals.sqlite_abort(h, sql)


@pytest.mark.postgres
@pytest.mark.usefixtures("_logins")
@pytest.mark.parametrize("login", ["runtime", "operator", "viewer"])
async def test_only_the_owner_writes_or_ends_a_freeze(
    pg: stores.Harness, now: ManualClock, login: str
) -> None:
    dispatch_id = await submit_change(pg.approver_store, now, "act-1", None)
    freeze_id = await _freeze(pg, now)
    before = await _rows(pg, dispatch_id)
    url = {
        "runtime": stores.runtime_url,
        "operator": stores.operator_url,
        "viewer": lambda db: stores.pg_url(db, login=VIEWER),
    }[login]
    add = (
        "INSERT INTO qinglong.freezes (from_ms, until_ms, reason, created_by) "
        f"VALUES (0, {now.ms + HOUR_MS}, 'mine', 'mallory')"
    )
    end = f"UPDATE qinglong.freezes SET ended_at_ms = 1 WHERE freeze_id = {freeze_id}"
    drop = f"DELETE FROM qinglong.freezes WHERE freeze_id = {freeze_id}"

    for sql in (add, end, drop):
        assert await _refused_as(pg, url, sql) == "42501", sql

    assert await _rows(pg, dispatch_id) == before


async def test_a_freeze_only_ends(harness: stores.Harness, now: ManualClock) -> None:
    """Even the owner's statement may only end a freeze, once: never shorten, move or delete
    it (PostgreSQL's owner login is the administrator, refused by the guard alike)."""
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    freeze_id = await _freeze(harness, now)
    before = await _rows(harness, dispatch_id)
    table = _t(harness, "freezes")
    moved = f"UPDATE {table} SET until_ms = from_ms + 1 WHERE freeze_id = {freeze_id}"
    dropped = f"DELETE FROM {table} WHERE freeze_id = {freeze_id}"

    for sql in (moved, dropped):
        if harness.dialect == "postgres":
            refusal = await refusals.sqlstate_as(stores.pg_url(await _database(harness)), sql)
            assert refusal == "QLI01", sql
        else:
            refusal = await refusals.sqlite_abort(harness, sql)
            assert refusal.startswith("qinglong:freeze_refused: "), sql

    assert await _rows(harness, dispatch_id) == before


@pytest.mark.parametrize("what", ["lease", "start"])
async def test_nothing_starts_while_a_freeze_covers_it(
    harness: stores.Harness, now: ManualClock, what: str
) -> None:
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", None)
    if what == "start":
        # Leased before the freeze, by the runtime's own statement.
        if harness.dialect == "postgres":
            url = stores.runtime_url(await _database(harness))
            await stores.as_login(url, _lease_sql(harness, now.ms, dispatch_id))
        else:
            await harness.raw(_lease_sql(harness, now.ms, dispatch_id))
    await _freeze(harness, now)
    before = await _rows(harness, dispatch_id)
    sql = (_lease_sql if what == "lease" else _start_sql)(harness, now.ms, dispatch_id)

    refusal = await _refused_as(harness, stores.runtime_url, sql)

    expected = {
        "postgres": "QLZ01",
        "sqlite": "qinglong:freeze_refused: a freeze covers this dispatch",
    }
    assert refusal == expected[harness.dialect]
    assert await _rows(harness, dispatch_id) == before


@pytest.mark.postgres
@pytest.mark.usefixtures("_logins")
async def test_the_requester_or_a_viewer_cannot_lift_a_freeze(
    pg: stores.Harness, now: ManualClock
) -> None:
    database = await _database(pg)
    requester = await stores.open_postgres(stores.pg_url(database, login=REQUESTER), max_size=1)
    try:
        dispatch_id = await submit_change(requester, now, "act-1", None)
    finally:
        await requester.close()
    freeze_id = await _freeze(pg, now)
    before = await _rows(pg, dispatch_id)
    lift = (
        "INSERT INTO qinglong.freeze_lifts (dispatch_id, freeze_id, reason) "
        f"VALUES ('{dispatch_id}', {freeze_id}, 'mine')"
    )

    by_requester = await refusals.sqlstate_as(stores.pg_url(database, login=REQUESTER), lift)
    by_viewer = await refusals.sqlstate_as(stores.pg_url(database, login=VIEWER), lift)

    assert (by_requester, by_viewer) == ("QLZ02", "42501")
    assert await _rows(pg, dispatch_id) == before
    # An operator who is not the requester may: the rule refused the requester, nothing else.
    await stores.as_login(stores.operator_url(database), lift)


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    """An edge file alone: the rule below is the file's (PostgreSQL names the acting login
    itself, the test above)."""
    async with stores.open_harness("sqlite", tmp_path_factory) as opened:
        yield opened


async def test_the_file_refuses_a_lift_in_the_requesters_name(
    edge: stores.Harness, now: ManualClock
) -> None:
    """On SQLite a lift names its principal (the store's OS user); the file refuses the
    requester's name whoever writes it."""
    h = edge
    dispatch_id = await submit_change(h.approver_store, now, "act-1", None)
    freeze_id = await _freeze(h, now)
    requester = await h.scalar(
        "SELECT r.requested_principal FROM approval_requests AS r "
        "JOIN approved_action_dispatches AS d USING (approval_request_id) "
        f"WHERE d.dispatch_id = '{dispatch_id}'"
    )
    before = await _rows(h, dispatch_id)
    lift = (
        "INSERT INTO freeze_lifts (dispatch_id, freeze_id, reason, lifted_by) "
        f"VALUES ('{dispatch_id}', {freeze_id}, 'mine', '{requester}')"
    )

    refusal = await refusals.sqlite_abort(h, lift)

    assert refusal == "qinglong:freeze_refused: the requester may not lift a freeze"
    assert await _rows(h, dispatch_id) == before
