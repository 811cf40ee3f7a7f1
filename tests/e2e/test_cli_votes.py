"""A quorum of 2 from 3 approvers through `approval vote`, on both profiles: the requester's
vote, a second vote and a vote from outside the groups are refused in one line (exit 1,
nothing written); the second approver's vote approves, the request is consumed and its
dispatch runs. A deny with a reason under `denials_to_reject = 1` rejects.

On cluster every principal is a PostgreSQL login. On edge the console script's principal is the
OS user (docs/decisions/0029): the other principals are token principals acting through the
store, the path the API's requests take."""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import api, clock, ports
from qinglong_dispatcher.domain import approvals, errors, principals
from qinglong_dispatcher.usecases import requesting, voting
from tests.support import stores
from tests.support.cli import error_lines, json_out, run_cli

PLAN = {
    "schemaVersion": 1,
    "actionRef": "act-quorum",
    "projectId": "p1",
    "taskId": "t1",
    "taskRevision": 2,
    "executorType": "shell",
    "priority": 0,
}


def _refused(result: subprocess.CompletedProcess[str], text: str, code: int = 1) -> None:
    assert result.returncode == code, result.stdout
    (line,) = error_lines(result.stderr)
    assert text in line, line
    assert "Traceback" not in result.stderr


# -- cluster: PostgreSQL logins, the group a role ---------------------------------------------

GROUP = f"ops_{stores.session_login('vgrp').removeprefix('qlt_')}"
GROUP_ROLE = f"{stores.INSTALLATION}_g_{GROUP}"
VOTER_B = stores.session_login("vote_b")
VOTER_C = stores.session_login("vote_c")
OUTSIDER = stores.session_login("vote_out")


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        await stores.raw(name, f"DROP ROLE IF EXISTS {GROUP_ROLE}")
        await stores.raw(name, f"CREATE ROLE {GROUP_ROLE} NOLOGIN")
        try:
            await stores.create_login(VOTER_B, "qinglong_approver", GROUP_ROLE)
            await stores.create_login(VOTER_C, "qinglong_approver", GROUP_ROLE)
            await stores.create_login(OUTSIDER, "qinglong_approver")
            # The requester is in the group too: only the requester rule may refuse it.
            await stores.raw(name, f"GRANT {GROUP_ROLE} TO {stores.APPROVER_LOGIN}")
            yield name
        finally:
            await stores.drop_roles(GROUP_ROLE)


async def _votes(database: str) -> list[dict[str, Any]]:
    return await stores.raw(
        database,
        "SELECT principal, vote, reason FROM qinglong.approval_votes ORDER BY voted_at_ms",
    )


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_quorum_of_two_from_three_through_the_cli(
    database: str, tmp_path: Path
) -> None:
    await stores.raw(
        database,
        "INSERT INTO qinglong.approval_policies (name, version, action_type, approvals_required,"
        f" approver_groups) VALUES ('two', 1, 'run.create', 2, '{{{GROUP}}}')",
    )
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    requester = stores.approver_url(database)

    def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--profile", "cluster", "--database", url, cwd=tmp_path)

    def as_login(login: str) -> str:
        return stores.pg_url(database, login=login)

    def steps() -> str:
        created = json_out(
            cli(
                requester,
                "approval",
                "create",
                "--action",
                "run.create",
                "--plan",
                "plan.json",
                "--requested-by",
                "alice",
                "--json",
            )
        )
        request = created["approval_request_id"]
        first = cli(as_login(VOTER_B), "approval", "vote", request, "--approve")
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == f"{request} pending (1 of 2 approvals, 0 of 1 denials)"
        _refused(cli(as_login(VOTER_B), "approval", "vote", request, "--approve"), "voted")
        _refused(cli(requester, "approval", "vote", request, "--approve"), "requester")
        _refused(cli(as_login(OUTSIDER), "approval", "vote", request, "--approve"), "groups")
        second = json_out(
            cli(
                as_login(VOTER_C),
                "approval",
                "vote",
                request,
                "--approve",
                "--by",
                "carol",
                "--json",
            )
        )
        assert second["status"] == "approved"
        assert (second["approvals"], second["approvals_required"]) == (2, 2)
        consumed = json_out(cli(requester, "approval", "consume", request, "--json"))
        report = json_out(cli(stores.runtime_url(database), "tick", "--drain", "--json"))
        assert report["outcomes"]["succeeded"] == 1
        return str(consumed["approval_request_id"])

    request = await anyio.to_thread.run_sync(steps)
    assert [(v["principal"], v["vote"]) for v in await _votes(database)] == [
        (VOTER_B, "approve"),
        (VOTER_C, "approve"),
    ]
    (row,) = await stores.raw(
        database,
        "SELECT status, decided_by, decided_principal FROM qinglong.approval_requests "
        f"WHERE approval_request_id = '{request}'",
    )
    assert tuple(row.values()) == ("consumed", "carol", VOTER_C)


@pytest.mark.postgres
async def test_cluster_a_deny_with_a_reason_rejects(database: str, tmp_path: Path) -> None:
    await stores.raw(
        database,
        "INSERT INTO qinglong.approval_policies (name, version, action_type, approvals_required,"
        f" approver_groups) VALUES ('two', 1, 'run.create', 2, '{{{GROUP}}}')",
    )
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))

    def steps() -> dict[str, Any]:
        created = json_out(
            run_cli(
                "approval",
                "create",
                "--action",
                "run.create",
                "--plan",
                "plan.json",
                "--requested-by",
                "alice",
                "--json",
                "--profile",
                "cluster",
                "--database",
                stores.approver_url(database),
                cwd=tmp_path,
            )
        )
        denied = run_cli(
            "approval",
            "vote",
            created["approval_request_id"],
            "--deny",
            "--reason",
            "wrong target",
            "--profile",
            "cluster",
            "--database",
            stores.pg_url(database, login=VOTER_B),
            cwd=tmp_path,
        )
        assert denied.returncode == 0, denied.stderr
        return {"line": denied.stdout.strip(), "id": created["approval_request_id"]}

    done = await anyio.to_thread.run_sync(steps)
    assert done["line"] == f"{done['id']} rejected"
    assert [(v["vote"], v["reason"]) for v in await _votes(database)] == [("deny", "wrong target")]


# -- edge: the OS user through the console script, token principals through the store --------


def _os_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


async def _acting(store: ports.Store, name: str) -> ports.ActingStore:
    who = principals.Authenticated(
        token_id="tok_" + "1" * 16, principal=name, role=principals.TokenRole.APPROVER
    )
    return await store.acting_as(who)


@pytest.fixture
async def edge(tmp_path: Path) -> AsyncIterator[tuple[Path, ports.Store]]:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    db = tmp_path / "var" / "qinglong.db"
    conn = sqlite3.connect(db)
    try:
        with conn:
            conn.execute(
                "INSERT INTO approval_policies (name, version, action_type, approvals_required,"
                " approver_groups, written_by) VALUES ('two', 1, 'run.create', 2, '[\"ops\"]',"
                " 'owner')"
            )
            conn.executemany(
                "INSERT INTO approval_group_members (group_name, principal) VALUES ('ops', ?)",
                [("alice",), (_os_user(),), ("carol",)],
            )
    finally:
        conn.close()
    store = await stores.open_sqlite(db, busy_timeout_s=5.0)
    try:
        yield tmp_path, store
    finally:
        await store.close()


@pytest.mark.slow
async def test_edge_quorum_of_two_from_three(edge: tuple[Path, ports.Store]) -> None:
    workdir, store = edge
    the_clock = clock.SystemClock()
    alice, carol, mallory = [await _acting(store, n) for n in ("alice", "carol", "mallory")]
    plan = api.run_create_plan({k: v for k, v in PLAN.items() if k != "schemaVersion"})
    policy = api.Policy(approval_ttl_ms=600_000, max_attempts=3)
    created = await requesting.request_approval(
        alice, the_clock, policy, plan, requested_by="alice"
    )
    request = created.approval_request_id

    def vote(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("approval", "vote", request, *args, cwd=workdir)

    first = await anyio.to_thread.run_sync(vote, "--approve")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"{request} pending (1 of 2 approvals, 0 of 1 denials)"
    _refused(await anyio.to_thread.run_sync(vote, "--approve"), "voted")
    with pytest.raises(errors.SelfApprovalRefused):
        await voting.vote(alice, the_clock, request, approvals.Vote.APPROVE)
    with pytest.raises(errors.ApprovalNotPermitted):
        await voting.vote(mallory, the_clock, request, approvals.Vote.APPROVE)
    approved = await voting.vote(carol, the_clock, request, approvals.Vote.APPROVE)
    assert approved.status is approvals.ApprovalStatus.APPROVED

    def finish() -> dict[str, Any]:
        json_out(run_cli("approval", "consume", request, "--json", cwd=workdir))
        return dict(json_out(run_cli("tick", "--drain", "--json", cwd=workdir)))

    assert (await anyio.to_thread.run_sync(finish))["outcomes"]["succeeded"] == 1


@pytest.mark.slow
async def test_edge_the_requesters_vote_and_a_long_reason_are_refused_through_the_cli(
    edge: tuple[Path, ports.Store],
) -> None:
    workdir, _ = edge
    (workdir / "plan.json").write_text(json.dumps(PLAN))

    def steps() -> None:
        created = json_out(
            run_cli(
                "approval",
                "create",
                "--action",
                "run.create",
                "--plan",
                "plan.json",
                "--requested-by",
                "me",
                "--json",
                cwd=workdir,
            )
        )
        request = created["approval_request_id"]
        _refused(run_cli("approval", "vote", request, "--approve", cwd=workdir), "requester")
        _refused(
            run_cli("approval", "vote", request, "--deny", "--reason", "x" * 501, cwd=workdir),
            "reason",
            code=2,
        )
        shown = json_out(run_cli("approval", "show", request, "--json", cwd=workdir))
        assert shown["status"] == "pending"

    await anyio.to_thread.run_sync(steps)
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        assert conn.execute("SELECT count(*) FROM approval_votes").fetchone()[0] == 0
    finally:
        conn.close()
