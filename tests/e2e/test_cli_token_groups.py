"""`token create --group G`: the token's principal joins approver groups, and `token list`
shows them. On SQLite the file holds the members; on PostgreSQL the group is the role
`<installation>_g_<group>`, made (marked) if missing and granted to the principal's role, and
a role of that name the installation did not make is refused in one line, nothing written.
Either way the principal's vote then counts under a policy naming the group."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher import api, clock, ports
from qinglong_dispatcher.domain import approvals, errors, installation, principals
from qinglong_dispatcher.usecases import requesting, voting
from tests.support import cli, stores

PLAN = {"projectId": "p1", "taskId": "t1", "taskRevision": 2, "actionRef": "act-g"}
POLICY = api.Policy(approval_ttl_ms=600_000, max_attempts=3)


def _refused(result: Any, text: str, code: int) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    (line,) = cli.error_lines(result.stderr)
    assert text in line, line
    assert "Traceback" not in result.stderr


async def _acting(store: ports.Store, name: str, role: principals.TokenRole) -> Any:
    who = principals.Authenticated(token_id="tok_" + "1" * 16, principal=name, role=role)
    return await store.acting_as(who)


async def _quorum_by_groups(store: ports.Store) -> None:
    """alice requests; mallory (in no group) is refused; bob (in `ops`) approves."""
    the_clock = clock.SystemClock()
    alice = await _acting(store, "alice", principals.TokenRole.SUBMITTER)
    request = await requesting.request_approval(
        alice, the_clock, POLICY, api.run_create_plan(PLAN), requested_by="alice"
    )
    mallory = await _acting(store, "mallory", principals.TokenRole.APPROVER)
    with pytest.raises(errors.ApprovalNotPermitted):
        await voting.vote(mallory, the_clock, request.approval_request_id, approvals.Vote.APPROVE)
    bob = await _acting(store, "bob", principals.TokenRole.APPROVER)
    voted = await voting.vote(bob, the_clock, request.approval_request_id, approvals.Vote.APPROVE)
    assert voted.status is approvals.ApprovalStatus.APPROVED


# -- edge --------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_edge_token_groups_are_members_in_the_file(tmp_path: Path) -> None:
    assert cli.run_cli("migrate", cwd=tmp_path).returncode == 0
    db = tmp_path / "var" / "qinglong.db"
    bad = cli.run_cli(
        "token",
        "create",
        "--principal",
        "bob",
        "--role",
        "approver",
        "--group",
        "Ops",
        cwd=tmp_path,
    )
    _refused(bad, "lower-case identifier", code=2)
    made = cli.json_out(
        cli.run_cli(
            "token",
            "create",
            "--principal",
            "bob",
            "--role",
            "approver",
            "--group",
            "ops",
            "--group",
            "audit",
            "--group",
            "ops",
            "--json",
            cwd=tmp_path,
        )
    )
    assert made["groups"] == ["audit", "ops"]
    for principal, role in (("alice", "submitter"), ("mallory", "approver")):
        created = cli.run_cli(
            "token", "create", "--principal", principal, "--role", role, cwd=tmp_path
        )
        assert created.returncode == 0, created.stderr
    listed = cli.json_out(cli.run_cli("token", "list", "--json", cwd=tmp_path))
    assert {t["principal"]: t["groups"] for t in listed} == {
        "bob": ["audit", "ops"],
        "alice": [],
        "mallory": [],
    }
    table = cli.run_cli("token", "list", cwd=tmp_path).stdout
    assert "audit,ops" in table
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "INSERT INTO approval_policies (name, version, action_type, approvals_required,"
                " approver_groups, written_by) VALUES ('ops', 1, 'run.create', 1, '[\"ops\"]',"
                " 'owner')"
            )
        members = conn.execute("SELECT group_name, principal FROM approval_group_members")
        assert sorted(members.fetchall()) == [("audit", "bob"), ("ops", "bob")]
    finally:
        conn.close()
    store = await stores.open_sqlite(db, busy_timeout_s=5.0)
    try:
        await _quorum_by_groups(store)
    finally:
        await store.close()


# -- cluster -----------------------------------------------------------------------------------


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[str]:
    """A migrated installation of its own; its principals' and groups' roles dropped after."""
    name = stores.session_installation("tgrp")
    made = [installation.principal_role(name, p) for p in ("alice", "bob", "mallory")]
    made += [installation.group_role(name, g) for g in ("ops", "audit", "evil", "wide")]
    try:
        async with stores.installation_database("tgrp") as database:
            migrated = cli.run_cli(
                "--profile",
                "cluster",
                "--database",
                stores.pg_url(database),
                "migrate",
                cwd=tmp_path,
            )
            assert migrated.returncode == 0, migrated.stderr
            yield database
    finally:
        await stores.drop_roles(*made)


def _token(database: str, cwd: Path, principal: str, role: str, *groups: str) -> Any:
    flags = [arg for group in groups for arg in ("--group", group)]
    return cli.run_cli(
        "--profile",
        "cluster",
        "--database",
        stores.pg_url(database),
        "token",
        "create",
        "--principal",
        principal,
        "--role",
        role,
        *flags,
        "--json",
        cwd=cwd,
    )


async def _admin(sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_token_groups_are_marked_roles_granted_to_the_principal(
    cluster: str, tmp_path: Path
) -> None:
    name = cluster  # the installation is named after its database
    made = cli.json_out(_token(cluster, tmp_path, "bob", "approver", "ops", "audit"))
    assert made["groups"] == ["audit", "ops"]
    (row,) = await _admin(
        "SELECT shobj_description(oid, 'pg_authid') AS mark, rolcanlogin FROM pg_roles"
        " WHERE rolname = $1",
        installation.group_role(name, "ops"),
    )
    assert row["mark"] == installation.group_mark(name, "ops")
    assert row["rolcanlogin"] is False
    # A second token of the principal takes its role again: its groups are the installation's.
    again = cli.json_out(_token(cluster, tmp_path, "bob", "approver", "ops"))
    assert again["groups"] == ["ops"]
    for principal, role in (("alice", "submitter"), ("mallory", "approver")):
        assert _token(cluster, tmp_path, principal, role).returncode == 0
    listed = cli.json_out(
        cli.run_cli(
            "--profile",
            "cluster",
            "--database",
            stores.pg_url(cluster),
            "token",
            "list",
            "--json",
            cwd=tmp_path,
        )
    )
    assert {t["principal"]: t["groups"] for t in listed} == {
        "bob": ["audit", "ops"],
        "alice": [],
        "mallory": [],
    }
    await stores.raw(
        cluster,
        "INSERT INTO qinglong.approval_policies (name, version, action_type, approvals_required,"
        " approver_groups) VALUES ('ops', 1, 'run.create', 1, '{ops}')",
    )
    store = await stores.open_postgres(stores.pg_url(cluster), max_size=2)
    try:
        await _quorum_by_groups(store)
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_a_group_role_the_installation_did_not_make_is_refused(
    cluster: str, tmp_path: Path
) -> None:
    name = cluster
    evil, wide = installation.group_role(name, "evil"), installation.group_role(name, "wide")
    await _admin(f"CREATE ROLE {evil} NOLOGIN")
    # Marked as the group's, but a member of the operator role: it would grant more than a vote.
    await _admin(f"CREATE ROLE {wide} NOLOGIN")
    await _admin(f"COMMENT ON ROLE {wide} IS '{installation.group_mark(name, 'wide')}'")
    await _admin(f"GRANT {installation.role(name, 'operator')} TO {wide}")
    for group, text in ((evil, "did not create it"), (wide, "holds nothing")):
        result = _token(cluster, tmp_path, "bob", "approver", group.rsplit("_g_", 1)[1])
        _refused(result, text, code=1)
    assert await stores.raw(cluster, "SELECT principal FROM qinglong.api_tokens") == []
    memberships = await _admin(
        "SELECT 1 FROM pg_auth_members AS m JOIN pg_roles AS g ON g.oid = m.roleid"
        " WHERE g.rolname = ANY($1::text[]) AND m.member <> (SELECT oid FROM pg_roles"
        " WHERE rolname = current_user)",
        [evil, wide],
    )
    assert memberships == []
