"""PostgreSQL least privilege (docs/security.md): what the runtime and operator roles may not do."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import installation, records, states
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

IMMUTABLE = {
    "approved_action_dispatches": "approved_by = approved_by",
    "approved_run_action_receipts": "result_code = result_code",
    "run_events": "event_type = event_type",
    "action_plans": "plan_digest = plan_digest",
    "execution_events": "result_code = result_code",
    "recovery_resolutions": "reason_code = reason_code",
    "security_audit_events": "detail_code = detail_code",
}
MUTABLE = ["approval_requests", "approved_action_dispatch_executions", "runs", "run_attempts"]
ROLES = (
    "qinglong_migrator",
    "qinglong_runtime",
    "qinglong_operator",
    "qinglong_approver",
    "qinglong_self_approver",
    "qinglong_pruner",
    "qinglong_recorder",
    "qinglong_plan_reader",
    "qinglong_viewer",
    "qinglong_submitter",
    "qinglong_api",
)


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


@pytest.mark.parametrize("table", sorted(IMMUTABLE))
async def test_runtime_may_not_update_delete_or_truncate_immutable_tables(
    database: str, table: str
) -> None:
    url = stores.runtime_url(database)
    for sql in (
        f"UPDATE qinglong.{table} SET {IMMUTABLE[table]}",
        f"DELETE FROM qinglong.{table}",
        f"TRUNCATE qinglong.{table}",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await stores.as_login(url, sql)
    assert await stores.as_login(url, f"SELECT count(*) FROM qinglong.{table}") is not None


@pytest.mark.parametrize("table", MUTABLE)
async def test_runtime_may_never_delete(database: str, table: str) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
        await stores.as_login(stores.runtime_url(database), f"DELETE FROM qinglong.{table}")


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE qinglong.intruder (a integer)",
        "ALTER TABLE qinglong.runs ADD COLUMN intruder integer",
        "DROP TABLE qinglong.run_events",
        "CREATE INDEX intruder ON qinglong.runs (task_id)",
        "DROP TRIGGER run_events_immutable ON qinglong.run_events",
        "CREATE SCHEMA intruder",
        "CREATE FUNCTION qinglong.intruder() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
        "ALTER TABLE qinglong.run_events DISABLE TRIGGER ALL",
    ],
)
async def test_runtime_may_not_do_ddl(database: str, ddl: str) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await stores.as_login(stores.runtime_url(database), ddl)


async def test_operator_updates_only_state_columns_and_appends_bookkeeping(
    database: str, clock: ManualClock
) -> None:
    store = await stores.open_postgres(stores.approver_url(database), max_size=2)
    try:
        (consumed,) = await submit_runs(store, clock, 1)
    finally:
        await store.close()
    url = stores.operator_url(database)
    table = "qinglong.approved_action_dispatch_executions"
    where = f"WHERE dispatch_id = '{consumed.dispatch_id}'"
    # The column grants admit an update of state columns; the state machine (migration 0006)
    # then refuses pending → pending, a change no resolution makes.
    with pytest.raises(asyncpg.PostgresError, match="transition_refused") as refused:
        await stores.as_login(
            url, f"UPDATE {table} SET version = version + 1, updated_at_ms = 1 {where}"
        )
    assert refused.value.sqlstate == "QLT01"
    for forbidden in (
        f"UPDATE {table} SET lease_token = 'forged' {where}",
        f"UPDATE {table} SET attempt = 0 {where}",
        f"DELETE FROM {table}",
        "UPDATE qinglong.runs SET task_id = 'x'",
        "INSERT INTO qinglong.approved_action_dispatches SELECT * FROM "
        "qinglong.approved_action_dispatches",
        "CREATE TABLE qinglong.intruder (a integer)",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await stores.as_login(url, forbidden)
    count = await stores.as_login(
        url, f"SELECT count(*) AS n FROM qinglong.execution_events {where}"
    )
    assert count[0]["n"] == 1


async def test_roles_are_nologin_and_the_migrator_owns_every_object(database: str) -> None:
    # Roles are server-wide: look only at those `migrate` marked as this installation's (a
    # name pattern would also find other installations', `qinglong_shop_runtime`, …).
    marks = ", ".join(
        f"'{installation.role_mark(stores.INSTALLATION, k)}'" for k in installation.KINDS
    )
    roles = await stores.raw(
        database,
        "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles "
        f"WHERE shobj_description(oid, 'pg_authid') IN ({marks})",
    )
    assert sorted(r["rolname"] for r in roles) == sorted(ROLES)
    assert not any(r["rolcanlogin"] or r["rolsuper"] or r["rolcreaterole"] for r in roles)
    owners = await stores.raw(
        database,
        "SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_class AS c "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = 'qinglong' "
        "UNION SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'qinglong' "
        "UNION SELECT pg_get_userbyid(p.proowner) FROM pg_proc AS p "
        "JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = 'qinglong' "
        "AND NOT p.prosecdef",
    )
    assert {r["owner"] for r in owners} == {"qinglong_migrator"}
    # The definer functions (they append what a session may not, read a whole plan for a plan
    # reader, choose and copy the policy in force into a new request, check what a request was
    # made again from, and tell the notification outbox) are the recorder's, and it owns
    # nothing else and holds nothing but USAGE, the INSERTs of what it appends, and the SELECTs
    # `read_plan`, the policy's choice and copy, the target and window copies, the freeze
    # probe, the origin check and the outbox need (a recovery's outbox event: an uncertain
    # outcome's code).
    definers = await stores.raw(
        database,
        "SELECT p.proname, pg_get_userbyid(p.proowner) AS owner FROM pg_proc AS p "
        "JOIN pg_namespace AS n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'qinglong' AND p.prosecdef ORDER BY 1",
    )
    assert [(r["proname"], r["owner"]) for r in definers] == [
        ("audit_approval_policy", "qinglong_recorder"),
        ("audit_approval_request", "qinglong_recorder"),
        ("audit_freeze", "qinglong_recorder"),
        ("check_requested_window", "qinglong_recorder"),
        ("copy_approval_policy", "qinglong_recorder"),
        ("decision_reasons", "qinglong_recorder"),
        ("dispatch_target_of_plan", "qinglong_recorder"),
        ("dispatch_traceparent_of_request", "qinglong_recorder"),
        ("dispatch_window_of_policy", "qinglong_recorder"),
        ("event_target", "qinglong_recorder"),
        ("execution_rule_of_policy", "qinglong_recorder"),
        ("execution_target_of_dispatch", "qinglong_recorder"),
        ("execution_window_of_dispatch", "qinglong_recorder"),
        ("freeze_covering", "qinglong_recorder"),
        ("guard_resubmitted_from", "qinglong_recorder"),
        ("keep_event_while_someone_listens", "qinglong_recorder"),
        ("mark_recovery_required", "qinglong_recorder"),
        ("read_plan", "qinglong_recorder"),
        ("record_execution_changes", "qinglong_recorder"),
        ("request_policy_in_force", "qinglong_recorder"),
        ("tell_approval_reminder", "qinglong_recorder"),
        ("tell_approval_request", "qinglong_recorder"),
        ("tell_execution_outcome", "qinglong_recorder"),
        ("tell_recovery_required", "qinglong_recorder"),
    ]
    grants = await stores.raw(
        database,
        "SELECT table_name, privilege_type FROM information_schema.role_table_grants "
        "WHERE grantee = 'qinglong_recorder' ORDER BY 1, 2",
    )
    assert [(r["table_name"], r["privilege_type"]) for r in grants] == [
        ("action_plans", "SELECT"),
        ("approval_policies", "SELECT"),
        ("approval_request_policies", "INSERT"),
        ("approval_request_policies", "SELECT"),
        ("approval_requests", "SELECT"),
        ("approved_action_dispatches", "SELECT"),
        ("execution_events", "INSERT"),
        ("freeze_lifts", "SELECT"),
        ("freezes", "SELECT"),
        ("notification_events", "INSERT"),
        ("notification_subscriptions", "SELECT"),
        ("recovery_required_marks", "INSERT"),
        ("security_audit_events", "INSERT"),
    ]
    # Of an uncertain outcome the outbox reads the handler's code, never what it knew.
    columns = await stores.raw(
        database,
        "SELECT column_name FROM information_schema.column_privileges "
        "WHERE grantee = 'qinglong_recorder' AND table_name = 'uncertain_outcomes' ORDER BY 1",
    )
    assert [r["column_name"] for r in columns] == [
        "dispatch_id",
        "execution_attempt",
        "result_code",
    ]


async def test_ddl_capabilities_flags_an_administrator_but_not_the_runtime(database: str) -> None:
    runtime = await stores.open_postgres(stores.runtime_url(database), max_size=1)
    admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
    try:
        assert await runtime.ddl_capabilities() == ()
        assert "superuser" in await admin.ddl_capabilities()
    finally:
        await runtime.close()
        await admin.close()


async def test_an_operator_login_can_resolve_recovery_and_is_the_recorded_principal(
    database: str, clock: ManualClock
) -> None:
    runtime = await stores.open_postgres(stores.runtime_url(database), max_size=2)
    operator = await stores.open_postgres(stores.operator_url(database), max_size=2)
    approver = await stores.open_postgres(stores.approver_url(database), max_size=1)
    try:
        (consumed,) = await submit_runs(approver, clock, 1)
        batch = await runtime.claim_due(now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=1000)
        (claim,) = batch.claimed
        assert claim.lease is not None
        assert claim.dispatch is not None
        (started,) = await runtime.start(
            [
                records.StartRequest(
                    lease=claim.lease,
                    approval_request_id=claim.dispatch.approval_request_id,
                    action_digest=claim.dispatch.action_digest,
                )
            ],
            now_ms=clock.now_ms(),
            lease_ms=1000,
        )
        assert started.identity is not None
        clock.advance(ms=1000)
        done = await api.resolve_manually(
            operator,
            clock,
            consumed.dispatch_id,
            resolution=states.Completion.FAILED,
            operator="oncall-1",
            reason="checked_downstream",
        )
        assert done.status is states.ExecutionStatus.FAILED
        stored = await runtime.get_resolution(consumed.dispatch_id)
        assert stored is not None
        assert (stored.resolved_by, stored.principal) == ("oncall-1", stores.OPERATOR_LOGIN)
        (audit,) = await runtime.audit_events(consumed.dispatch_id)
        assert audit.principal == stores.OPERATOR_LOGIN
    finally:
        await runtime.close()
        await operator.close()
        await approver.close()
