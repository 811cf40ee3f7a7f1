"""One change at a time per target, attacked from plain logins holding only their documented
roles (PostgreSQL: the runtime, operator and approver logins of docs/security.md; SQLite: a
plain connection to the file): a second dispatch on a target past its claim, whether by a
login's direct UPDATE or by two transactions racing, is refused by the partial unique index
(nothing changed); a target never changes, and one an INSERT names is the plan's anyway; a held
target cannot be freed by settling its row in SQL where the role may not settle; and real
replicas claiming at once lease one dispatch per target and fail no claim."""

from __future__ import annotations

import time
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.adapters.postgres import queries as postgres_queries
from qinglong_dispatcher.domain import plans
from qinglong_dispatcher.usecases import requesting
from tests.support import faults, refusals, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.targets import MODELS, TARGET_TYPE, claim_and_start, submit_change

LONG_LEASE_MS = 3_600_000
UNIQUE_TARGET = {
    "postgres": "23505",
    "sqlite": "UNIQUE constraint failed: approved_action_dispatch_executions.target",
}


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these leases as the test means them."""
    return ManualClock(int(time.time() * 1000))


def _executions(h: stores.Harness) -> str:
    return faults.table(h, "approved_action_dispatch_executions")


async def _database(h: stores.Harness) -> str:
    return str(await h.scalar("SELECT current_database()"))


async def _snapshot(h: stores.Harness, dispatch_id: str) -> tuple[Any, ...]:
    """The attacked row and everything a lease or a settlement of it would add to."""
    row = await h.raw(f"SELECT * FROM {_executions(h)} WHERE dispatch_id = '{dispatch_id}'")
    of_it = f"WHERE dispatch_id = '{dispatch_id}'"
    counts = await h.raw(
        f"SELECT (SELECT count(*) FROM {faults.table(h, 'execution_events')} {of_it}) AS events, "
        f"(SELECT count(*) FROM {faults.table(h, 'recovery_resolutions')} {of_it}) "
        "AS resolutions"
    )
    return row[0], counts[0]


def _lease_sql(h: stores.Harness, now_ms: int, dispatch_id: str) -> str:
    """The runtime's own lease of a waiting row, written by hand (what `lease_page` writes)."""
    expires = now_ms + LONG_LEASE_MS
    proof = ", lease_proof = 'mallory'" if h.dialect == "postgres" else ""
    return (
        f"UPDATE {_executions(h)} SET status = 'leased', version = version + 1, "
        "attempt = attempt + 1, lease_owner = 'mallory', lease_token = 'mallory', "
        f"lease_expires_at_ms = {expires}, eligible_at_ms = {expires}, "
        f"updated_at_ms = {now_ms}{proof} WHERE dispatch_id = '{dispatch_id}'"
    )


async def _as_runtime(h: stores.Harness, sql: str) -> None:
    if h.dialect == "postgres":
        await stores.as_login(stores.runtime_url(await _database(h)), sql)
    else:
        await h.raw(sql)


async def _refused_as_runtime(h: stores.Harness, sql: str) -> str:
    if h.dialect == "postgres":
        return await refusals.sqlstate_as(stores.runtime_url(await _database(h)), sql)
    return await refusals.sqlite_abort(h, sql)


@pytest.mark.parametrize("holder", ["leased", "executing", "recovery_required"])
async def test_a_login_cannot_lease_a_second_dispatch_on_a_target(
    harness: stores.Harness, now: ManualClock, holder: str
) -> None:
    first = await submit_change(harness.approver_store, now, "act-1", "router-1")
    if holder == "leased":
        await harness.store.claim_due(now_ms=now.ms, owner="w1", limit=1, lease_ms=LONG_LEASE_MS)
    else:
        lease_ms = 200 if holder == "recovery_required" else LONG_LEASE_MS
        dispatch, _ = await claim_and_start(harness.store, now, lease_ms=lease_ms)
        assert dispatch.dispatch_id == first
        await anyio.sleep(0.3)
    now.ms = int(time.time() * 1000)
    second = await submit_change(harness.approver_store, now, "act-2", "router-1")
    before = await _snapshot(harness, second)

    refusal = await _refused_as_runtime(harness, _lease_sql(harness, now.ms, second))

    assert refusal == UNIQUE_TARGET[harness.dialect]
    assert await _snapshot(harness, second) == before
    # The same statement on a free target takes: the index refused, not some other rule.
    free = await submit_change(harness.approver_store, now, "act-3", "router-2")
    await _as_runtime(harness, _lease_sql(harness, now.ms, free))


async def test_a_target_never_changes(harness: stores.Harness, now: ManualClock) -> None:
    dispatch_id = await submit_change(harness.approver_store, now, "act-1", "router-1")
    before = await _snapshot(harness, dispatch_id)

    # The runtime's own lease of the row (which the state machine admits), moving it to a
    # free target on the way.
    moved = _lease_sql(harness, now.ms, dispatch_id).replace(
        "SET status", "SET target = 'router-2', status"
    )
    refusal = await _refused_as_runtime(harness, moved)

    expected = {"postgres": "QLI01", "sqlite": "qinglong:target_refused: a target never changes"}
    assert refusal == expected[harness.dialect]
    assert await _snapshot(harness, dispatch_id) == before


@pytest.mark.postgres
async def test_two_transactions_racing_for_one_target_the_second_is_refused(
    pg: stores.Harness, now: ManualClock
) -> None:
    """Two replicas' leases in transactions that cannot see each other: the second waits for
    the first's index entry, then the index refuses it."""
    first = await submit_change(pg.approver_store, now, "act-1", "router-1")
    second = await submit_change(pg.approver_store, now, "act-2", "router-1")
    before = await _snapshot(pg, second)
    url = stores.runtime_url(await _database(pg))
    one, two = await asyncpg.connect(url, timeout=5), await asyncpg.connect(url, timeout=5)
    refused: list[str] = []
    try:
        tx_one, tx_two = one.transaction(), two.transaction()
        await tx_one.start()
        await tx_two.start()
        await one.execute(_lease_sql(pg, now.ms, first))

        async def lease_second() -> None:
            try:
                await two.execute(_lease_sql(pg, now.ms, second))
            except asyncpg.PostgresError as exc:
                refused.append(str(exc.sqlstate))
                await tx_two.rollback()

        async with anyio.create_task_group() as tg:
            tg.start_soon(lease_second)
            await anyio.sleep(0.5)
            assert not refused  # waiting on the first's uncommitted entry
            await tx_one.commit()
    finally:
        await one.close()
        await two.close()
    assert refused == ["23505"]
    assert await _snapshot(pg, second) == before


@pytest.mark.postgres
async def test_a_replicas_open_claim_keeps_its_targets_other_rows_from_another_replica(
    pg: stores.Harness, now: ManualClock
) -> None:
    """The claim's observation, as two replicas run it at once (the runtime login, `SKIP
    LOCKED`): while one replica's claim transaction is open, the other observes none of the
    rows of a target the first observed, though it skips only the first's own locked row."""
    first = await submit_change(pg.approver_store, now, "act-1", "router-1")
    now.advance(ms=1)
    second = await submit_change(pg.approver_store, now, "act-2", "router-1")
    free = await submit_change(pg.approver_store, now, "act-3", "router-2")
    statements = postgres_queries.load(stores.TABLES.statements)
    statement, plans = statements["claim_due_rows"], statements["page_plans"].text

    def observe(limit: int) -> list[object]:
        return statement.args(
            {
                "now_ms": now.ms + 1,
                "limit": limit,
                "skip_action_types": "[]",
                "ahead": 0,
            }
        )

    url = stores.runtime_url(await _database(pg))
    one, two = await asyncpg.connect(url, timeout=5), await asyncpg.connect(url, timeout=5)
    try:
        async with one.transaction():
            await one.execute(plans)  # as `claim_due` opens its transaction
            seen_one = [r["dispatch_id"] for r in await one.fetch(statement.text, *observe(1))]
            async with two.transaction():
                await two.execute(plans)
                found = await two.fetch(statement.text, *observe(16))
                seen_two = [r["dispatch_id"] for r in found]
    finally:
        await one.close()
        await two.close()
    assert seen_one == [first]
    assert seen_two == [free]  # not `second`: router-1 is the first replica's to claim
    assert second not in seen_two


async def test_replicas_claiming_at_once_lease_one_dispatch_per_target(
    harness: stores.Harness, now: ManualClock
) -> None:
    routers = ["router-1", "router-2", "router-3"]
    for i in range(12):
        await submit_change(harness.approver_store, now, f"act-{i}", routers[i % 3])
    replicas = [harness.store] + [await harness.open_another() for _ in range(3)]
    claimed: list[str] = []

    async def claim(store: Any, owner: str) -> None:
        for _ in range(5):
            batch = await store.claim_due(
                now_ms=now.ms, owner=owner, limit=16, lease_ms=LONG_LEASE_MS
            )
            claimed.extend(c.dispatch_id for c in batch.claimed)

    async with anyio.create_task_group() as tg:
        for n, store in enumerate(replicas):
            tg.start_soon(claim, store, f"w{n}")

    rows = await harness.raw(
        f"SELECT target, count(*) AS n FROM {_executions(harness)} "
        "WHERE status IN ('leased', 'executing') GROUP BY target ORDER BY target"
    )
    assert [(r["target"], r["n"]) for r in rows] == [(r, 1) for r in routers]
    assert len(claimed) == 3
    untouched = await harness.raw(
        f"SELECT count(*) AS n FROM {_executions(harness)} "
        "WHERE status = 'pending' AND attempt = 0 AND version = 0"
    )
    assert untouched[0]["n"] == 9


@pytest.mark.postgres
@pytest.mark.parametrize("role", ["operator", "approver"])
async def test_a_held_target_cannot_be_freed_by_settling_its_row_in_sql(
    pg: stores.Harness, now: ManualClock, role: str
) -> None:
    first = await submit_change(pg.approver_store, now, "act-1", "router-1")
    dispatch, _ = await claim_and_start(pg.store, now, lease_ms=200)
    assert dispatch.dispatch_id == first
    await anyio.sleep(0.3)
    now.ms = int(time.time() * 1000)
    second = await submit_change(pg.approver_store, now, "act-2", "router-1")
    before = (await _snapshot(pg, first), await _snapshot(pg, second))
    url = {"operator": stores.operator_url, "approver": stores.approver_url}[role]

    state = await refusals.sqlstate_as(
        url(await _database(pg)),
        f"UPDATE {_executions(pg)} SET status = 'failed', version = version + 1, "
        "result_mutation_id = 'sql', result_code = 'sql', completed_at_ms = 1, "
        f"updated_at_ms = 1 WHERE dispatch_id = '{first}'",
    )

    assert state == {"operator": "QLF01", "approver": "42501"}[role]
    assert (await _snapshot(pg, first), await _snapshot(pg, second)) == before
    batch = await pg.store.claim_due(now_ms=now.ms, owner="w2", limit=16, lease_ms=LONG_LEASE_MS)
    assert batch.claimed == ()


def _forged_consume(h: stores.Harness, approval_request_id: str, now_ms: int) -> list[str]:
    """The approver's consume written by hand, naming a target of its own choosing for the
    dispatch and its execution (the store's statements name none)."""
    requests = faults.table(h, "approval_requests")
    return [
        f"UPDATE {requests} SET status = 'consumed', version = 3, consumed_at_ms = {now_ms}, "
        f"consumed_principal = session_user, updated_at_ms = {now_ms} "
        f"WHERE approval_request_id = '{approval_request_id}'",
        f"INSERT INTO {faults.table(h, 'approved_action_dispatches')} (dispatch_id, "
        "approval_request_id, project_id, action_type, action_ref, action_digest, approved_by, "
        f"created_at_ms, target) SELECT 'd-forged', approval_request_id, project_id, "
        f"action_type, action_ref, action_digest, decided_by, {now_ms}, 'router-forged' "
        f"FROM {requests} WHERE approval_request_id = '{approval_request_id}'",
        f"INSERT INTO {_executions(h)} (dispatch_id, project_id, status, version, attempt, "
        "max_attempts, eligible_at_ms, created_at_ms, updated_at_ms, target) "
        f"VALUES ('d-forged', 'p1', 'pending', 0, 0, 5, {now_ms}, {now_ms}, {now_ms}, "
        "'router-forged')",
    ]


@pytest.mark.postgres
async def test_a_login_inserting_a_forged_target_gets_the_plans_target(
    pg: stores.Harness, now: ManualClock
) -> None:
    """The approver login consumes an approved change by hand, naming another target for the
    dispatch and the execution: the recorder's definer triggers overwrite both with the plan's
    (its router), so the forged name never holds or frees anything."""
    the_api = make_api(pg.approver_store, now)
    plan = plans.parse_plan(
        TARGET_TYPE,
        {"schemaVersion": 1, "actionRef": "act-forged", "projectId": "p1", "router": "router-1"},
        models=MODELS,
    )
    request = await requesting.request_approval(
        pg.approver_store,
        now,
        api.Policy(approval_ttl_ms=600_000, max_attempts=5),
        plan,
        requested_by="sam",
    )
    await the_api.approve(request.approval_request_id, decided_by="bob")

    connection = await asyncpg.connect(stores.approver_url(await _database(pg)), timeout=5)
    try:
        async with connection.transaction():
            for sql in _forged_consume(pg, request.approval_request_id, now.ms):
                await connection.execute(sql)
    finally:
        await connection.close()

    rows = await pg.raw(
        f"SELECT d.target AS d, e.target AS e FROM {_executions(pg)} AS e "
        f"JOIN {faults.table(pg, 'approved_action_dispatches')} AS d USING (dispatch_id) "
        "WHERE e.dispatch_id = 'd-forged'"
    )
    assert [(r["d"], r["e"]) for r in rows] == [("router-1", "router-1")]
