"""OIDC sign-in wired through the real `run` daemon (a subprocess) by `QINGLONG_OIDC_FILE`: the
sign-in page offers the provider, a sign-in begins at the provider found by its discovery
document with its own cookie, and a bad OIDC file stops the daemon in one line."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from tests.support import oidc_provider
from tests.support.cli import error_lines, run_cli
from tests.support.daemon import free_port, get, ready, running, wait_until


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    return tmp_path


def _start(port: int) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/ui/oidc/start?next=/ui/approvals")
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_the_daemon_offers_the_provider_and_begins_a_sign_in_there(workdir: Path) -> None:
    metrics_port, api_port = free_port(), free_port()
    with oidc_provider.provider() as upstream:
        (workdir / "secret").write_text("a-client-secret\n")
        (workdir / "oidc.toml").write_text(
            f'issuer = "{upstream}"\nclient_id = "qinglong-ui"\nclient_secret_file = "secret"\n'
            f'redirect_url = "http://127.0.0.1:{api_port}/ui/oidc/callback"\n'
            '[roles]\n"ops" = "operator"\n'
        )
        env = {
            "QINGLONG_METRICS_PORT": str(metrics_port),
            "QINGLONG_API_LISTEN": f"127.0.0.1:{api_port}",
            "QINGLONG_OIDC_FILE": str(workdir / "oidc.toml"),
        }
        with running(workdir, env):
            wait_until(lambda: ready(metrics_port))
            status, page = get(api_port, "/ui/signin")
            assert status == 200
            assert 'href="/ui/oidc/start?next=%2Fui"' in page
            answer = _start(api_port)
            assert answer.status == 303
            assert answer.headers["Location"].startswith(upstream + "/oauth2/authorize?")
            cookie = answer.headers["Set-Cookie"]
            assert cookie.startswith("qinglong_oidc=")
            for part in ("HttpOnly", "Path=/ui/oidc", "SameSite=Lax", "Max-Age=600"):
                assert part in cookie, cookie


def test_a_bad_oidc_file_stops_the_daemon_in_one_line(workdir: Path) -> None:
    (workdir / "oidc.toml").write_text(
        'issuer = "http://idp.example.com"\nclient_id = "x"\n'
        'redirect_url = "https://q.example.com/ui/oidc/callback"\n'
    )
    env = {
        "QINGLONG_API_LISTEN": f"127.0.0.1:{free_port()}",
        "QINGLONG_METRICS_PORT": str(free_port()),
        "QINGLONG_OIDC_FILE": str(workdir / "oidc.toml"),
    }
    done = run_cli("run", cwd=workdir, env=env)
    assert done.returncode != 0
    assert error_lines(done.stderr) == [
        "qinglong-dispatcher: error: OIDC file: issuer must be https (http only to loopback)"
    ]
