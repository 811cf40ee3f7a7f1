"""The control plane's path on a cluster, end to end with the real `run` daemon: tokens made by
`token create` (an administrator), a submitter's plan and an approver's approval through the
API, each write acting in PostgreSQL as its principal through the API's NOINHERIT login
(`QINGLONG_API_DATABASE_URL`), the daemon executing what was approved, and a self-approval
refused by the database."""

from __future__ import annotations

import http.client
import json
import signal
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import api
from tests.support import stores
from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

pytestmark = pytest.mark.postgres

API_LOGIN = stores.session_login("api_daemon")


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


def _token(admin: list[str], cwd: Path, name: str, role: str) -> str:
    made = json_out(
        run_cli("token", "create", "--principal", name, "--role", role, "--json", *admin, cwd=cwd)
    )
    return str(made["secret"])


def _control_plane(name: str, cwd: Path, names: dict[str, str]) -> None:
    admin = ["--profile", "cluster", "--database", stores.pg_url(name)]
    alice = _token(admin, cwd, names["alice"], "submitter")
    bob = _token(admin, cwd, names["bob"], "approver")
    metrics_port, api_port = free_port(), free_port()
    env = {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": stores.runtime_url(name),
        "QINGLONG_INSTALLATION": stores.INSTALLATION,
        "QINGLONG_CADENCE_SECONDS": "0.2",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_API_LISTEN": f"127.0.0.1:{api_port}",
        "QINGLONG_API_DATABASE_URL": stores.pg_url(name, login=API_LOGIN),
    }
    plan = api.run_create_plan({"projectId": "shop", "taskId": "deploy", "taskRevision": 3})
    with running(cwd, env) as daemon:
        wait_until(lambda: ready(metrics_port))
        body = {"action": "run.create", "plan": plan.to_canonical_dict()}
        status, submitted = _call(api_port, "POST", "/dispatches", alice, body)
        assert status == 201, submitted
        approval = submitted["approval"]["approval_request_id"]
        status, refused = _call(api_port, "POST", f"/approvals/{approval}/approve", alice)
        assert status == 403, refused  # alice is no approver, and may not approve her own
        status, approved = _call(api_port, "POST", f"/approvals/{approval}/approve", bob)
        assert status == 200, approved
        assert approved["approval"]["decided_principal"] == names["bob"]
        dispatch = approved["dispatch_id"]

        def settled() -> bool:
            status, shown = _call(api_port, "GET", f"/dispatches/{dispatch}", bob)
            return status == 200 and shown["execution"]["status"] == "succeeded"

        wait_until(settled)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        assert alice not in daemon.stderr
        assert bob not in daemon.stderr


@pytest.fixture
def principal_names() -> dict[str, str]:
    return {who: stores.session_principal(f"{who}_daemon") for who in ("alice", "bob")}


@pytest.mark.slow
async def test_a_control_plane_submits_and_an_approver_approves_through_the_daemons_api(
    tmp_path: Path, principal_names: dict[str, str]
) -> None:
    async with stores.fresh_database() as name:
        await stores.create_login(API_LOGIN, f"{stores.INSTALLATION}_api")
        await stores.raw(name, f"ALTER ROLE {API_LOGIN} NOINHERIT")
        try:
            await anyio.to_thread.run_sync(_control_plane, name, tmp_path, principal_names)
        finally:
            await stores.drop_roles(
                *(f"{stores.INSTALLATION}_p_{n}" for n in principal_names.values())
            )
