"""A quorum through the real `run` daemon's API, on the edge profile (SQLite) and the cluster
profile (PostgreSQL, each write acting as its principal through the API's NOINHERIT login):
tokens made by `token create`, policy `two` (2 approvals from a group of 3 approvers) written
by the schema's owner. A request waits after the first approval (1 of 2, the other two named),
the same approver's second vote is 409 `already_voted`, the second approver's vote approves it
and the daemon executes its dispatch; the metrics show the waiting request by policy and the
decision's time."""

from __future__ import annotations

import http.client
import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import api
from tests.support import stores
from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, get, ready, running, wait_until

API_LOGIN = stores.session_login("api_votes")
GROUP = f"ops_{stores.session_login('dgrp').removeprefix('qlt_')}"
WHO = {"sam": "submitter", "bob": "approver", "dan": "approver", "erin": "approver"}


def _call(
    port: int, method: str, path: str, token: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, f"/api/v1{path}", body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def _tokens(admin: list[str], cwd: Path, names: dict[str, str]) -> dict[str, str]:
    made = {}
    for who, role in WHO.items():
        out = run_cli(
            "token", "create", "--principal", names[who], "--role", role, "--json", *admin, cwd=cwd
        )
        made[who] = str(json_out(out)["secret"])
    return made


def _metric(port: int, line_start: str) -> float | None:
    _, text = get(port, "/metrics")
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


def _quorum(env: dict[str, str], cwd: Path, tokens: dict[str, str], names: dict[str, str]) -> None:
    metrics_port, api_port = free_port(), free_port()
    env = {
        **env,
        "QINGLONG_CADENCE_SECONDS": "0.2",
        "QINGLONG_RECONCILE_SECONDS": "0.2",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_API_LISTEN": f"127.0.0.1:{api_port}",
    }
    plan = api.run_create_plan({"projectId": "shop", "taskId": "deploy", "taskRevision": 3})
    with running(cwd, env) as daemon:
        wait_until(lambda: ready(metrics_port))
        body = {"action": "run.create", "plan": plan.to_canonical_dict()}
        status, submitted = _call(api_port, "POST", "/dispatches", tokens["sam"], body)
        assert status == 201, submitted
        approval = submitted["approval"]["approval_request_id"]
        waiting = 'qinglong_dispatcher_approvals_waiting{policy="two"}'
        wait_until(lambda: _metric(metrics_port, waiting) == 1)

        votes = f"/approvals/{approval}/votes"
        status, voted = _call(api_port, "POST", votes, tokens["bob"], {"vote": "approve"})
        assert status == 200, voted
        shown = voted["approval"]
        assert (shown["status"], shown["approvals"], shown["policy"]["approvals_required"]) == (
            "pending",
            1,
            2,
        )
        assert shown["may_vote"] == sorted((names["dan"], names["erin"]))
        status, refused = _call(api_port, "POST", votes, tokens["bob"], {"vote": "approve"})
        assert (status, refused["code"]) == (409, "already_voted"), refused
        status, voted = _call(api_port, "POST", votes, tokens["dan"], {"vote": "approve"})
        assert status == 200, voted
        dispatch = voted["dispatch_id"]

        def settled() -> bool:
            status, shown = _call(api_port, "GET", f"/dispatches/{dispatch}", tokens["bob"])
            return status == 200 and shown["execution"]["status"] == "succeeded"

        wait_until(settled)
        wait_until(lambda: _metric(metrics_port, waiting) == 0)
        decided = 'qinglong_dispatcher_approval_decision_seconds_count{outcome="approved"}'
        assert _metric(metrics_port, decided) == 1
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    for secret in tokens.values():
        assert secret not in daemon.stderr


@pytest.fixture
def names() -> dict[str, str]:
    return {who: stores.session_principal(f"{who}_dvote") for who in WHO}


@pytest.mark.slow
def test_two_of_three_through_the_edge_daemons_api(tmp_path: Path, names: dict[str, str]) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    tokens = _tokens([], tmp_path, names)
    with sqlite3.connect(tmp_path / "var" / "qinglong.db") as owner:  # the file's owner
        owner.execute(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "approver_groups, written_by) VALUES ('two', 1, 'run.create', 2, ?, 'owner')",
            (json.dumps([GROUP]),),
        )
        owner.executemany(
            "INSERT INTO approval_group_members (group_name, principal) VALUES (?, ?)",
            [(GROUP, names[w]) for w in ("bob", "dan", "erin")],
        )
    _quorum({}, tmp_path, tokens, names)


@pytest.mark.slow
@pytest.mark.postgres
async def test_two_of_three_through_the_cluster_daemons_api(
    tmp_path: Path, names: dict[str, str]
) -> None:
    role = f"{stores.INSTALLATION}_g_{GROUP}"
    async with stores.fresh_database() as name:
        await stores.create_login(API_LOGIN, f"{stores.INSTALLATION}_api")
        await stores.raw(name, f"ALTER ROLE {API_LOGIN} NOINHERIT")
        admin = ["--profile", "cluster", "--database", stores.pg_url(name)]
        try:
            tokens = await anyio.to_thread.run_sync(_tokens, admin, tmp_path, names)
            await stores.raw(name, f"DROP ROLE IF EXISTS {role}")
            await stores.raw(name, f"CREATE ROLE {role} NOLOGIN")
            for who in ("bob", "dan", "erin"):
                await stores.raw(name, f"GRANT {role} TO {stores.INSTALLATION}_p_{names[who]}")
            await stores.raw(
                name,
                "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
                f"approver_groups) VALUES ('two', 'run.create', 2, '{{{GROUP}}}')",
            )
            env = {
                "QINGLONG_PROFILE": "cluster",
                "QINGLONG_DATABASE_URL": stores.runtime_url(name),
                "QINGLONG_INSTALLATION": stores.INSTALLATION,
                "QINGLONG_API_DATABASE_URL": stores.pg_url(name, login=API_LOGIN),
            }
            await anyio.to_thread.run_sync(_quorum, env, tmp_path, tokens, names)
        finally:
            await stores.drop_roles(role, *(f"{stores.INSTALLATION}_p_{n}" for n in names.values()))
