"""Separation of duties on the edge API by default: a real edge daemon (`run` on SQLite) serving
its API on a unix socket refuses a token's principal approving the request it submitted
(`403 self_approval_refused`, problem+json, nothing written), as a principal role is refused
on PostgreSQL unless granted `_self_approver`; `QINGLONG_API_SELF_APPROVAL=true` is the
edge's grant."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import api
from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

_TABLES = (
    "action_plans",
    "approval_requests",
    "approved_action_dispatches",
    "approved_action_dispatch_executions",
    "security_audit_events",
)


def _call(
    socket_path: Path, method: str, path: str, token: str, body: dict[str, Any] | None = None
) -> tuple[int, str, dict[str, Any]]:
    class Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(10)
            self.sock.connect(str(socket_path))

    connection = Unix("localhost", timeout=10)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, f"/api/v1{path}", body=payload, headers=headers)
        response = connection.getresponse()
        kind = response.getheader("Content-Type") or ""
        return response.status, kind, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def _snapshot(database: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables an approval touches, read with plain sqlite3."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in _TABLES}
    finally:
        conn.close()


def _submit_and_approve_own(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Alice (approver, so also a submitter) submits, then approves her own request."""
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    alice = str(json_out(run_cli("token", "create", "--principal", "alice", "--role",
                                 "approver", "--json", cwd=tmp_path))["secret"])  # fmt: skip
    bob = str(json_out(run_cli("token", "create", "--principal", "bob", "--role",
                               "approver", "--json", cwd=tmp_path))["secret"])  # fmt: skip
    socket_path = tmp_path / "api.sock"
    metrics_port = free_port()
    plan = api.run_create_plan({"projectId": "router", "taskId": "reboot", "taskRevision": 1})
    body = {"action": "run.create", "plan": plan.to_canonical_dict()}
    daemon_env = {
        "QINGLONG_CADENCE_SECONDS": "0.1",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        "QINGLONG_API_LISTEN": f"unix:{socket_path}",
        **env,
    }
    with running(tmp_path, daemon_env) as daemon:
        wait_until(lambda: ready(metrics_port))
        status, _, submitted = _call(socket_path, "POST", "/dispatches", alice, body)
        assert status == 201, submitted
        approval = submitted["approval"]["approval_request_id"]
        before = _snapshot(tmp_path / "var" / "qinglong.db")
        own = _call(socket_path, "POST", f"/approvals/{approval}/approve", alice)
        after_own = _snapshot(tmp_path / "var" / "qinglong.db")
        other = None
        if own[0] != 200:
            other = _call(socket_path, "POST", f"/approvals/{approval}/approve", bob)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    return {"own": own, "other": other, "unchanged": before == after_own}


@pytest.mark.slow
def test_by_default_a_token_principal_may_not_approve_its_own_request(tmp_path: Path) -> None:
    seen = _submit_and_approve_own(tmp_path, {})
    status, kind, problem = seen["own"]
    assert status == 403, problem
    assert kind.startswith("application/problem+json")
    assert problem["code"] == "self_approval_refused"
    assert problem["status"] == 403
    assert seen["unchanged"]  # no decision, no dispatch, no audit row
    # Another principal's approval of the same request still goes through.
    status, _, approved = seen["other"]
    assert status == 200, approved
    assert approved["approval"]["requested_principal"] == "alice"
    assert approved["approval"]["decided_principal"] == "bob"


@pytest.mark.slow
def test_the_edge_grant_lets_a_token_principal_approve_its_own_request(tmp_path: Path) -> None:
    seen = _submit_and_approve_own(tmp_path, {"QINGLONG_API_SELF_APPROVAL": "true"})
    status, _, approved = seen["own"]
    assert status == 200, approved
    assert approved["approval"]["decided_principal"] == "alice"


@pytest.mark.slow
def test_the_os_user_setting_does_not_reach_token_principals(tmp_path: Path) -> None:
    # `QINGLONG_SELF_APPROVAL` is the file owner's (the CLI's `submit`); a token's principal
    # is not the owner and keeps separation of duties.
    seen = _submit_and_approve_own(tmp_path, {"QINGLONG_SELF_APPROVAL": "true"})
    status, _, problem = seen["own"]
    assert status == 403, problem
    assert problem["code"] == "self_approval_refused"
    assert seen["unchanged"]
