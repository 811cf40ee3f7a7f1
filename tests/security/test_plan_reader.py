"""The whole plan only for a plan reader, audited by the database (migration 0014).

Each attack comes from a plain login holding only its documented role and asserts the
database's own refusal (its SQLSTATE) and that no audit row was written; the plan reader gets
the plan and exactly one audit row, which names its login and never the plan.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import errors, ids, plans
from tests.support import refusals, stores
from tests.support.actions import DEFAULT_TTL_MS
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

MARKER = "customer-9d2e-marker"
READ_PLAN = "SELECT * FROM qinglong.read_plan($1)"
PLAN_READS = "SELECT count(*) AS n FROM qinglong.security_audit_events WHERE kind = 'plan.read'"
AUDIT_ROWS = "SELECT count(*) AS n FROM qinglong.security_audit_events"
PLAN_READER_LOGIN = stores.session_login("plan_reader")
"""In `qinglong_plan_reader` only."""


@pytest.fixture
async def pg(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("postgres", tmp_path_factory) as harness:
        await stores.create_login(PLAN_READER_LOGIN, "qinglong_plan_reader")
        yield harness


async def _database(pg: stores.Harness) -> str:
    return str(await pg.scalar("SELECT current_database()"))


async def _dispatch(pg: stores.Harness, clock: ManualClock) -> str:
    """An approved and consumed `http.request` whose headers and body hold the marker."""
    plan = plans.parse_plan(
        "http.request",
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": "p1",
            "receiver": "orders",
            "method": "POST",
            "path": "/orders",
            "headers": [["x-customer", MARKER]],
            "body": base64.b64encode(MARKER.encode()).decode(),
        },
        models=builtin.PLAN_MODELS,
    )
    the_api = api.Api(
        pg.approver_store, clock, api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5)
    )
    (consumed,) = await the_api.submit([plan], requested_by="alice", approved_by="bob")
    return consumed.dispatch_id


@pytest.mark.parametrize("role", ["runtime", "operator", "approver"])
async def test_a_login_that_is_not_a_plan_reader_is_refused_the_whole_plan_and_nothing_is_audited(
    pg: stores.Harness, clock: ManualClock, role: str
) -> None:
    dispatch_id = await _dispatch(pg, clock)
    url = stores.pg_url(await _database(pg), login=getattr(stores, f"{role.upper()}_LOGIN"))
    before = await pg.scalar(AUDIT_ROWS)
    assert await refusals.sqlstate_as(url, READ_PLAN, dispatch_id) == "42501"
    assert await pg.scalar(AUDIT_ROWS) == before


async def test_a_plan_reader_gets_the_plan_and_exactly_one_audit_row_without_it(
    pg: stores.Harness, clock: ManualClock
) -> None:
    dispatch_id = await _dispatch(pg, clock)
    url = stores.pg_url(await _database(pg), login=PLAN_READER_LOGIN)
    before = await pg.scalar(AUDIT_ROWS)
    conn = await asyncpg.connect(url, timeout=5)
    try:
        (row,) = await conn.fetch(READ_PLAN, dispatch_id)
        assert await conn.fetch(READ_PLAN, "d-unknown") == []  # nothing read, nothing written
    finally:
        await conn.close()
    assert row["action_type"] == "http.request"
    assert MARKER in row["plan_json"]
    assert await pg.scalar(AUDIT_ROWS) == before + 1
    audit = await pg.raw(
        "SELECT kind, actor, principal, project_id, subject_id, detail_code "
        "FROM qinglong.security_audit_events WHERE kind = 'plan.read'"
    )
    assert audit == [
        {
            "kind": "plan.read",
            "actor": PLAN_READER_LOGIN,
            "principal": PLAN_READER_LOGIN,
            "project_id": "p1",
            "subject_id": dispatch_id,
            "detail_code": "http.request",
        }
    ]
    assert MARKER not in repr(await pg.raw("SELECT * FROM qinglong.security_audit_events"))


async def test_execute_granted_by_mistake_still_refuses_a_login_that_is_not_a_plan_reader(
    pg: stores.Harness, clock: ManualClock
) -> None:
    # The function's own membership check, not only its EXECUTE grant, keeps the plan.
    dispatch_id = await _dispatch(pg, clock)
    await pg.raw("GRANT EXECUTE ON FUNCTION qinglong.read_plan(text) TO PUBLIC")
    before = await pg.scalar(AUDIT_ROWS)
    assert await refusals.sqlstate_as(
        stores.operator_url(await _database(pg)), READ_PLAN, dispatch_id
    ) == ("42501")
    assert await pg.scalar(AUDIT_ROWS) == before


async def test_a_plan_reader_has_no_unaudited_way_to_a_plan_and_nobody_forges_a_plan_read(
    pg: stores.Harness, clock: ManualClock
) -> None:
    await _dispatch(pg, clock)
    database = await _database(pg)
    reader = stores.pg_url(database, login=PLAN_READER_LOGIN)
    assert (
        await refusals.sqlstate_as(reader, "SELECT plan_json FROM qinglong.action_plans") == "42501"
    )
    forged = (
        "INSERT INTO qinglong.security_audit_events (kind, actor, principal, project_id, "
        "subject_id, detail_code, committed_at_ms) VALUES ('plan.read', 'x', session_user, "
        "'p1', 'd-x', 'http.request', 1)"
    )
    assert await refusals.sqlstate_as(reader, forged) == "42501"
    # The operator may append audit rows (resolutions, cancels), never a plan read.
    assert await refusals.sqlstate_as(stores.operator_url(database), forged) == "QLI01"
    assert await pg.scalar(PLAN_READS) == 0


async def test_the_store_reads_for_a_plan_reader_and_refuses_others_in_one_line(
    pg: stores.Harness, clock: ManualClock
) -> None:

    dispatch_id = await _dispatch(pg, clock)
    with pytest.raises(errors.PlanReadRefused) as refused:
        await pg.operator_store.read_full_plan(dispatch_id)
    assert "\n" not in str(refused.value)
    assert MARKER not in str(refused.value)
    reader = await stores.open_postgres(
        stores.pg_url(await _database(pg), login=PLAN_READER_LOGIN), max_size=1
    )
    try:
        found = await reader.read_full_plan(dispatch_id)
    finally:
        await reader.close()
    assert found is not None
    assert MARKER in found.plan_json
    assert await pg.scalar(PLAN_READS) == 1
