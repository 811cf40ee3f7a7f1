"""Installations apart: two dispatcher databases on one server share no role.

Roles are server-wide. Each database `migrate` makes is an installation of its own, whose
roles carry its name; a login of one installation holds nothing in another's database, and
the database says so itself (SQLSTATE 42501) with nothing changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.domain import errors, installation
from tests.support import cli, stores
from tests.support.clock import START_MS

pytestmark = pytest.mark.postgres

ALL_MIGRATIONS = [m.version for m in migration_files.load("postgres")]


async def _migrate(database: str, requested: str | None = None) -> list[int]:
    store = await stores.open_postgres(stores.pg_url(database), max_size=1, installation=requested)
    try:
        return await store.migrate(now_ms=START_MS)
    finally:
        await store.close()


@pytest.fixture
async def shop() -> AsyncIterator[str]:
    async with stores.installation_database("shop") as name:
        yield name


@pytest.fixture
async def depot() -> AsyncIterator[str]:
    async with stores.installation_database("depot") as name:
        yield name


async def test_a_new_database_is_an_installation_named_after_it(shop: str) -> None:
    assert await _migrate(shop) == ALL_MIGRATIONS
    made = await stores.raw(
        shop,
        "SELECT rolname, rolcanlogin FROM pg_roles WHERE starts_with(rolname, "
        f"'{shop}_') ORDER BY rolname",
    )
    assert [r["rolname"] for r in made] == sorted(installation.roles(shop))
    assert not any(r["rolcanlogin"] for r in made)
    owner = await stores.raw(
        shop, "SELECT nspowner::regrole::text AS owner FROM pg_namespace WHERE nspname = 'qinglong'"
    )
    assert owner == [{"owner": f"{shop}_migrator"}]
    grants = await stores.raw(
        shop,
        "SELECT has_table_privilege(r, 'qinglong.approved_action_dispatch_executions', "
        "'UPDATE') AS may FROM unnest(ARRAY[$$" + shop + "_runtime$$, 'qinglong_runtime']) AS r",
    )
    assert [g["may"] for g in grants] == [True, False]
    # The database's own messages name the installation's roles, not the template's.
    bodies = await stores.raw(
        shop,
        "SELECT count(*) AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'qinglong' AND p.prosrc ~ 'qinglong_(operator|approver|pruner|"
        "recorder|self_approver)'",
    )
    assert bodies == [{"n": 0}]


async def test_a_migrated_database_keeps_its_installation_and_refuses_another(shop: str) -> None:
    await _migrate(shop)
    assert await _migrate(shop) == []
    assert await _migrate(shop, requested=shop) == []
    # Another installation's name, of this session (roles are server-wide: a count of all of
    # them would move with every other session's).
    elsewhere = stores.session_installation("elsewhere")
    names = ", ".join(f"'{role}'" for role in installation.roles(elsewhere))
    made = f"SELECT count(*) AS n FROM pg_roles WHERE rolname IN ({names})"
    with pytest.raises(errors.StoreError) as refused:
        await _migrate(shop, requested=elsewhere)
    assert refused.value.code == "installation_mismatch"
    assert await stores.raw(shop, made) == [{"n": 0}]


async def test_a_database_of_the_legacy_installation_stays_in_it() -> None:
    async with stores.fresh_database() as cloned:
        # A clone of the suite's template: migrated before, its schema the legacy migrator's.
        assert await _migrate(cloned) == []
        named = await stores.raw(
            cloned, f"SELECT count(*) AS n FROM pg_roles WHERE starts_with(rolname, '{cloned}')"
        )
        assert named == [{"n": 0}]


async def _counts(database: str) -> dict[str, Any]:
    rows = await stores.raw(
        database,
        "SELECT (SELECT count(*) FROM qinglong.approval_requests) AS requests, "
        "(SELECT string_agg(status || version, ',') FROM qinglong.approval_requests) AS states, "
        "(SELECT count(*) FROM qinglong.action_plans) AS plans, "
        "(SELECT count(*) FROM qinglong.approved_action_dispatch_executions) AS executions, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit",
    )
    return rows[0]


async def _sqlstate(url: str, sql: str) -> str:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        with pytest.raises(asyncpg.PostgresError) as caught:
            await conn.execute(sql)
        return str(caught.value.sqlstate)
    finally:
        await conn.close()


async def test_a_login_of_another_installation_holds_nothing_here(shop: str, depot: str) -> None:
    await _migrate(shop)
    await _migrate(depot)
    # A pending request in the shop, written by its administrator.
    await stores.raw(
        shop,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-x', 'run.create', '{{}}', "
        f"'{'a' * 64}', 1)",
    )
    await stores.raw(
        shop,
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-x', 'p', 'run.create', "
        f"'act-x', '{'b' * 64}', 'pending', 1, 'me', session_user, "
        "(extract(epoch FROM now()) * 1000)::bigint + 3600000, "
        "(extract(epoch FROM now()) * 1000)::bigint, (extract(epoch FROM now()) * 1000)::bigint)",
    )
    # Every role of the depot, the approver one with self-approval: the worst login it has.
    intruder = stores.session_login("depot_everything")
    await stores.create_login(
        intruder, *(installation.role(depot, kind) for kind in installation.KINDS[1:6])
    )
    at_depot, at_shop = stores.pg_url(depot, login=intruder), stores.pg_url(shop, login=intruder)
    # The login works in its own installation: the refusals below are the installation's.
    assert await stores.as_login(at_depot, "SELECT count(*) FROM qinglong.approval_requests")
    before = await _counts(shop)
    attacks = (
        "SELECT * FROM qinglong.approval_requests",
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        "decided_by = 'x', decided_principal = session_user WHERE approval_request_id = 'a-x'",
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-y', 'run.create', '{{}}', "
        f"'{'c' * 64}', 1)",
        "UPDATE qinglong.approved_action_dispatch_executions SET status = 'succeeded'",
        "SELECT qinglong.db_now_ms()",
    )
    for attack in attacks:
        assert await _sqlstate(at_shop, attack) == "42501", attack
    assert await _counts(shop) == before


_PRIVILEGES = """
SELECT k.kind, c.relname, a.attname, p.privilege,
       CASE WHEN a.attname IS NULL
            THEN has_table_privilege(k.role, c.oid, p.privilege)
            ELSE has_column_privilege(k.role, c.oid, a.attname, p.privilege) END AS held
FROM unnest($1::text[], $2::text[]) AS k(kind, role)
CROSS JOIN pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = 'qinglong'
LEFT JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p(privilege)
WHERE c.relkind = 'r' AND (a.attname IS NULL OR p.privilege IN ('SELECT', 'UPDATE', 'INSERT'))
UNION ALL
SELECT k.kind, f.oid::regprocedure::text, NULL, 'EXECUTE',
       has_function_privilege(k.role, f.oid, 'EXECUTE')
           AND NOT has_function_privilege('public', f.oid, 'EXECUTE')
FROM unnest($1::text[], $2::text[]) AS k(kind, role)
CROSS JOIN pg_proc AS f JOIN pg_namespace AS n ON n.oid = f.pronamespace AND n.nspname = 'qinglong'
UNION ALL
SELECT k.kind, 'schema', NULL, 'USAGE', has_schema_privilege(k.role, 'qinglong', 'USAGE')
FROM unnest($1::text[], $2::text[]) AS k(kind, role)
"""
"""What each role kind of an installation may do in the database, object by object (beyond
what every login may: a function PUBLIC may execute is reachable only through the schema)."""


async def _held(database: str, name: str) -> set[tuple[Any, ...]]:
    conn = await asyncpg.connect(stores.pg_url(database), timeout=5)
    try:
        rows = await conn.fetch(
            _PRIVILEGES, list(installation.KINDS), list(installation.roles(name))
        )
    finally:
        await conn.close()
    return {tuple(row[:4]) for row in rows if row["held"]}


async def test_a_legacy_database_moves_to_roles_of_its_own(tmp_path: Path) -> None:
    async with stores.installation_database("moved") as name:
        # A database of the legacy installation, its qinglong_* roles shared server-wide.
        assert await _migrate(name, requested=installation.LEGACY) == ALL_MIGRATIONS
        legacy = await _held(name, installation.LEGACY)
        assert legacy
        moved = cli.run_cli(
            "--profile", "cluster", "--database", stores.pg_url(name),
            "migrate", "--move-to", name, "--json", cwd=tmp_path,
        )  # fmt: skip
        report = cli.json_out(moved)
        assert (report["from"], report["to"]) == (installation.LEGACY, name)
        assert stores.RUNTIME_LOGIN in report["members"]
        assert await _held(name, name) == legacy
        assert await _held(name, installation.LEGACY) == set()
        owner = await stores.raw(
            name, "SELECT nspowner::regrole::text AS o FROM pg_namespace WHERE nspname = 'qinglong'"
        )
        assert owner == [{"o": f"{name}_migrator"}]
        # From now on the database is the new installation's, and its triggers say so.
        assert await _migrate(name) == []
        approver = stores.session_login("approver_of_moved")
        await stores.create_login(approver, f"{name}_approver", f"{name}_self_approver")
        as_new = stores.pg_url(name, login=approver)
        plan = (
            "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
            f"plan_digest, created_at_ms) VALUES ('p', 'act-m', 'run.create', '{{}}', "
            f"'{'a' * 64}', 1)"
        )
        await stores.as_login(as_new, plan)
        assert await _sqlstate(stores.approver_url(name), plan) == "42501"
        await stores.as_login(
            as_new,
            "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, "
            "action_type, action_ref, action_digest, status, version, requested_by, "
            "requested_principal, expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-m', "
            f"'p', 'run.create', 'act-m', '{'b' * 64}', 'pending', 1, 'me', session_user, "
            "qinglong.db_now_ms() + 3600000, qinglong.db_now_ms(), qinglong.db_now_ms())",
        )
        await stores.as_login(
            as_new,
            "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
            "decided_by = 'me', decided_principal = session_user "
            "WHERE approval_request_id = 'a-m'",
        )
        decided = await stores.raw(name, "SELECT status FROM qinglong.approval_requests")
        assert decided == [{"status": "approved"}]


async def test_moving_names_a_valid_installation_and_needs_postgresql(tmp_path: Path) -> None:
    async with stores.installation_database("unmoved") as name:
        await _migrate(name)
        bad = cli.run_cli(
            "--profile", "cluster", "--database", stores.pg_url(name),
            "migrate", "--move-to", "Not-A-Name", cwd=tmp_path,
        )  # fmt: skip
        assert bad.returncode == 78, bad.stderr
        assert len(cli.error_lines(bad.stderr)) == 1
        assert await _held(name, name)
    edge = cli.run_cli(
        "--database", f"sqlite:///{tmp_path}/q.db", "migrate", "--move-to", "shop", cwd=tmp_path
    )
    assert edge.returncode == 78, edge.stderr
    assert "PostgreSQL only" in edge.stderr
    assert not (tmp_path / "q.db").exists()
