"""The API inside the real `run` daemon (a subprocess): on with `QINGLONG_API_LISTEN` over TCP or
a unix socket, answering a token of its store (`token create`) until it is revoked, stopped
gracefully with the daemon, a taken address refused in one line (exit 78), and never imported
when it is off."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import error_lines, run_cli
from tests.support.daemon import free_port, get, log_events, ready, running, wait_until


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    return tmp_path


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=5)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(self._path))


def _unix_get(path: Path, target: str) -> tuple[int, str]:
    connection = _UnixConnection(path)
    try:
        connection.request("GET", target, headers={"Authorization": "Bearer some-token"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def _get_as(port: int, target: str, token: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", target, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.mark.slow
def test_the_daemon_serves_the_api_to_a_token_of_its_store_until_revoked(workdir: Path) -> None:
    made = run_cli(
        "token", "create", "--principal", "vera", "--role", "viewer", "--json", cwd=workdir
    )
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)
    metrics_port, api_port = free_port(), free_port()
    env = {
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        "QINGLONG_API_LISTEN": f"127.0.0.1:{api_port}",
    }
    with running(workdir, env) as daemon:
        wait_until(lambda: ready(metrics_port))
        status, body = get(api_port, "/api/v1/status")
        assert status == 401
        assert json.loads(body)["type"] == "/problems/unauthenticated"
        status, body = _get_as(api_port, "/api/v1/status", token["secret"])
        assert status == 200, body
        assert "executions" in json.loads(body)
        assert _get_as(api_port, "/api/v1/status", token["secret"] + "x")[0] == 401
        revoked = run_cli("token", "revoke", token["token_id"], cwd=workdir)
        assert revoked.returncode == 0, revoked.stderr
        assert _get_as(api_port, "/api/v1/status", token["secret"])[0] == 401  # at once
        assert get(api_port, "/api/v1/healthz")[0] == 200
        assert get(api_port, "/api/v1/openapi.json")[0] == 200
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    assert token["secret"] not in daemon.stderr
    names = [event["event"] for event in log_events(daemon.stderr)]
    assert "api.no_token_store" not in names
    assert names.index("api.listening") < names.index("daemon.ready")
    assert "api.stopped" in names
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", api_port), timeout=1).close()


@pytest.mark.slow
def test_the_api_on_a_unix_socket_is_private_to_the_group_and_removed_at_stop(
    workdir: Path,
) -> None:
    path = workdir / "api.sock"
    metrics_port = free_port()
    env = {
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_METRICS_PORT": str(metrics_port),
        "QINGLONG_API_LISTEN": f"unix:{path}",
    }
    with running(workdir, env) as daemon:
        wait_until(lambda: ready(metrics_port))
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        status, body = _unix_get(path, "/api/v1/status")
        assert status == 401
        assert json.loads(body)["code"] == "unauthenticated"
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    assert not path.exists()


@pytest.mark.slow
def test_a_taken_api_address_stops_the_start_in_one_line(workdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"QINGLONG_METRICS_PORT": "0", "QINGLONG_API_LISTEN": f"127.0.0.1:{port}"}
        result = run_cli("run", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "QINGLONG_API_LISTEN: cannot listen on" in line
    assert "Traceback" not in result.stderr


_IMPORTS = """
import sys
from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.commands import dispatching
from qinglong_dispatcher.config.settings import load_settings
settings = load_settings(database_url="sqlite:///{db}", environ={env!r})
bootstrap.build_daemon_parts(settings, None, clock.SystemClock())
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "aiohttp"
                or m.startswith("qinglong_dispatcher.web"))
print(len(loaded))
"""


@pytest.mark.parametrize(
    ("env", "imported"), [({}, False), ({"QINGLONG_API_LISTEN": "127.0.0.1:0"}, True)]
)
def test_the_web_package_and_aiohttp_are_imported_only_when_the_api_is_on(
    tmp_path: Path, env: dict[str, str], imported: bool
) -> None:
    code = _IMPORTS.format(db=tmp_path / "x.db", env=env)
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (int(result.stdout.split()[-1]) > 0) is imported
    assert ("aiohttp" in result.stderr) is imported  # the -X importtime report agrees
