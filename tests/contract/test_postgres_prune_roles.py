"""PostgreSQL retention roles (migration 0009): only `qinglong_pruner` deletes, and only rows
of a tree a permit names; the runtime and operator logins are refused as before."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher

pytestmark = pytest.mark.postgres

TREE_TABLES = (
    "action_plans",
    "approval_requests",
    "approved_action_dispatches",
    "approved_action_dispatch_executions",
    "execution_events",
    "approved_run_action_receipts",
    "recovery_resolutions",
    "recovery_observations",
    "security_audit_events",
)
INTRUDER_LOGIN = stores.session_login("intruder")
"""A login granted DELETE directly, but not a member of qinglong_pruner."""


@pytest.fixture
async def database(clock: ManualClock) -> AsyncIterator[str]:
    """A fresh database with one succeeded run.create dispatch (a whole finished tree)."""
    async with stores.fresh_database() as name:
        await submit_runs_as_approver(name, clock, 1)
        runtime = await stores.open_postgres(stores.runtime_url(name), max_size=2)
        try:
            report = await make_dispatcher(runtime, clock).dispatch_batch()
        finally:
            await runtime.close()
        assert report.outcomes["succeeded"] == 1
        yield name


@pytest.mark.parametrize("login", ["runtime", "operator", "approver"])
async def test_only_the_pruner_is_granted_delete(database: str, login: str) -> None:
    url = stores.pg_url(database, login=stores.session_login(login))
    for table in (*TREE_TABLES, "prune_permits", "audit_prune_permits"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await stores.as_login(url, f"DELETE FROM qinglong.{table}")


async def test_the_pruner_deletes_nothing_a_permit_does_not_name(database: str) -> None:
    # Row triggers: only tables with rows in this finished tree can show the refusal.
    for table in set(TREE_TABLES) - {"recovery_resolutions", "recovery_observations"}:
        with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
            await stores.as_login(stores.pruner_url(database), f"DELETE FROM qinglong.{table}")
        (row,) = await stores.raw(database, f"SELECT count(*) AS n FROM qinglong.{table}")
        assert row["n"] >= 1, table


async def test_a_permit_admits_the_pruner_and_no_one_else(database: str) -> None:
    (tree,) = await stores.raw(
        database,
        "SELECT d.dispatch_id, d.approval_request_id, d.project_id, d.action_ref, "
        "e.updated_at_ms FROM qinglong.approved_action_dispatches AS d "
        "JOIN qinglong.approved_action_dispatch_executions AS e USING (dispatch_id)",
    )
    await stores.raw(
        database,
        f"""DO $login$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{INTRUDER_LOGIN}') THEN
                CREATE ROLE {INTRUDER_LOGIN} LOGIN PASSWORD '{stores.LOGIN_PASSWORD}';
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $login$""",
    )
    await stores.raw(database, f"GRANT USAGE ON SCHEMA qinglong TO {INTRUDER_LOGIN}")
    await stores.raw(
        database, f"GRANT SELECT, DELETE ON qinglong.execution_events TO {INTRUDER_LOGIN}"
    )
    # A permit the pruner could have written: the tree is terminal, the cutoff after it.
    await stores.raw(
        database,
        "INSERT INTO qinglong.prune_permits (dispatch_id, approval_request_id, project_id, "
        f"action_ref, cutoff_ms) VALUES ('{tree['dispatch_id']}', "
        f"'{tree['approval_request_id']}', '{tree['project_id']}', '{tree['action_ref']}', "
        f"{tree['updated_at_ms'] + 1})",
    )
    delete = f"DELETE FROM qinglong.execution_events WHERE dispatch_id = '{tree['dispatch_id']}'"
    intruder = stores.pg_url(database, login=INTRUDER_LOGIN)
    with pytest.raises(asyncpg.RestrictViolationError, match="immutable"):
        await stores.as_login(intruder, delete)
    await stores.as_login(stores.pruner_url(database), delete)
    (row,) = await stores.raw(database, "SELECT count(*) AS n FROM qinglong.execution_events")
    assert row["n"] == 0


async def test_the_pruner_may_not_update_or_truncate(database: str) -> None:
    url = stores.pruner_url(database)
    for sql in (
        "UPDATE qinglong.approved_action_dispatch_executions SET version = version + 1",
        "TRUNCATE qinglong.execution_events",
        "DELETE FROM qinglong.runs",
        "DELETE FROM qinglong.step_runs",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stores.as_login(url, sql)
