"""The edge story end to end: a real edge daemon (`run` on SQLite) serves its API on a unix
socket, or over TLS requiring a client certificate; a control plane (this test process) submits
a plan with a submitter's token, an approver's token approves it, and the daemon executes it.
Tokens are made by `token create`, as the file's owner would."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import api
from tests.support import pki
from tests.support.cli import json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

Connect = Callable[[], http.client.HTTPConnection]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=10)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(str(self._path))


def _call(
    connect: Connect, method: str, path: str, token: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    connection = connect()
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, f"/api/v1{path}", body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def _token(cwd: Path, name: str, role: str) -> str:
    made = run_cli("token", "create", "--principal", name, "--role", role, "--json", cwd=cwd)
    return str(json_out(made)["secret"])


def _listener(kind: str, folder: Path) -> tuple[dict[str, str], Connect, Connect | None]:
    """The daemon's API settings, how the control plane connects, and (for TLS) how a client
    without a certificate would."""
    if kind == "unix":
        path = folder / "api.sock"
        return {"QINGLONG_API_LISTEN": f"unix:{path}"}, lambda: _UnixConnection(path), None
    (folder / "pki").mkdir()
    certs = pki.make(folder / "pki")
    port = free_port()
    env = {
        "QINGLONG_API_LISTEN": f"127.0.0.1:{port}",
        "QINGLONG_API_TLS_CERT_FILE": str(certs / "server.pem"),
        "QINGLONG_API_TLS_KEY_FILE": str(certs / "server.key"),
        "QINGLONG_API_CLIENT_CA_FILE": str(certs / "ca.pem"),
    }
    trusted = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    anonymous = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    trusted.load_cert_chain(certs / "client.pem", certs / "client.key")

    def with_certificate() -> http.client.HTTPConnection:
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=trusted)

    def without_certificate() -> http.client.HTTPConnection:
        return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=anonymous)

    return env, with_certificate, without_certificate


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["unix", "mtls"])
def test_a_control_plane_submits_an_approver_approves_and_the_edge_daemon_executes(
    tmp_path: Path, kind: str
) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    sam = _token(tmp_path, "sam", "submitter")
    alice = _token(tmp_path, "alice", "approver")
    listen, connect, anonymous = _listener(kind, tmp_path)
    metrics_port = free_port()
    env = {
        "QINGLONG_CADENCE_SECONDS": "0.1",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        **listen,
    }
    plan = api.run_create_plan({"projectId": "router", "taskId": "reboot", "taskRevision": 1})
    with running(tmp_path, env) as daemon:
        wait_until(lambda: ready(metrics_port))
        if anonymous is not None:
            # A client without a certificate from the control plane's CA never gets a request in.
            with pytest.raises((ssl.SSLError, ConnectionError)):
                _call(anonymous, "GET", "/status", alice)
        body = {"action": "run.create", "plan": plan.to_canonical_dict()}
        status, submitted = _call(connect, "POST", "/dispatches", sam, body)
        assert status == 201, submitted
        approval = submitted["approval"]["approval_request_id"]
        assert submitted["approval"]["requested_principal"] == "sam"
        status, refused = _call(connect, "POST", f"/approvals/{approval}/approve", sam)
        assert status == 403, refused  # a submitter decides nothing
        status, approved = _call(connect, "POST", f"/approvals/{approval}/approve", alice)
        assert status == 200, approved
        assert approved["approval"]["decided_principal"] == "alice"
        dispatch = approved["dispatch_id"]

        def settled() -> bool:
            status, shown = _call(connect, "GET", f"/dispatches/{dispatch}", alice)
            return status == 200 and shown["execution"]["status"] == "succeeded"

        wait_until(settled)
        status, audit = _call(connect, "GET", f"/audit?subject={approval}", alice)
        assert status == 200, audit
        assert {(r["kind"], r["principal"]) for r in audit["audit"]} >= {
            ("api.create", "sam"),
            ("api.approve", "alice"),
        }
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
        assert sam not in daemon.stderr
        assert alice not in daemon.stderr
