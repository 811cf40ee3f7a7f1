"""PostgreSQL: the state-machine triggers hold whichever login writes (migration 0006)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.domain.tools import steps
from tests.support import state_machine as sm
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

pytestmark = pytest.mark.postgres

FUNCTIONS = ("check_execution_change", "check_step_run_change")


@pytest.fixture
async def harness(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    async with stores.open_harness("postgres", tmp_path_factory) as opened:
        yield opened


async def test_the_runtime_login_cannot_send_a_succeeded_execution_back_to_pending(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    report = await make_dispatcher(harness.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    database = await harness.scalar("SELECT current_database()")
    table = f"qinglong.{sm.EXECUTIONS}"
    where = f"WHERE dispatch_id = '{consumed.dispatch_id}'"
    # Before migration 0006 the first statement answered UPDATE 1: the grants allow it.
    for url, sql in (
        (
            stores.runtime_url(database),
            f"UPDATE {table} SET status = 'pending', version = version + 1, "
            f"attempt = attempt - 1, eligible_at_ms = {clock.now_ms()} {where}",
        ),
        (stores.runtime_url(database), f"UPDATE {table} SET status = 'pending' {where}"),
        (stores.operator_url(database), f"UPDATE {table} SET status = 'pending' {where}"),
    ):
        with pytest.raises(asyncpg.PostgresError, match="terminal") as caught:
            await stores.as_login(url, sql)
        assert caught.value.sqlstate == "QLT01"
        assert "succeeded → pending" in str(caught.value)
    execution = await harness.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert execution.status is ExecutionStatus.SUCCEEDED


async def test_only_an_operator_login_re_arms_a_lost_step_run(
    harness: Harness, clock: ManualClock
) -> None:
    runtime_lost, operator_lost = await sm.step_runs_in(
        harness, clock, [steps.StepRunStatus.LOST, steps.StepRunStatus.LOST]
    )
    database = await harness.scalar("SELECT current_database()")
    rearm = "UPDATE qinglong.step_runs SET status = 'ready', version = version + 1 WHERE "
    with pytest.raises(asyncpg.PostgresError, match="operator") as caught:
        await stores.as_login(
            stores.runtime_url(database), f"{rearm} step_run_id = '{runtime_lost}'"
        )
    assert caught.value.sqlstate == "QLT01"
    rows = await stores.as_login(
        stores.operator_url(database),
        f"{rearm} step_run_id = '{operator_lost}' RETURNING status",
    )
    assert [r["status"] for r in rows] == ["ready"]


async def test_the_trigger_functions_are_the_migrators_with_a_fixed_search_path(
    harness: Harness,
) -> None:
    rows = await harness.raw(
        "SELECT p.proname, pg_get_userbyid(p.proowner) AS owner, p.proconfig, "
        "has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_call "
        "FROM pg_proc AS p WHERE p.pronamespace = 'qinglong'::regnamespace "
        f"AND p.proname IN {sm.in_list(list(FUNCTIONS))} ORDER BY p.proname"
    )
    assert [(r["proname"], r["owner"], r["proconfig"], r["public_may_call"]) for r in rows] == [
        (name, "qinglong_migrator", ["search_path=pg_catalog, pg_temp"], False)
        for name in FUNCTIONS
    ]
