"""The edge install of docs/installation.md, step by step, from the release artefacts to a ready
daemon: `make dist` (the wheel, the lock, a wheelhouse checked against the lock's hashes), a
clean venv at the fake root's /opt/qinglong-dispatcher filled offline, then the unit's own
ExecStartPre and ExecStart with the unit's environment (there is no systemd here), and
install-check.sh against that root while the daemon runs and after it stopped.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support import daemon

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "qinglong-dispatcher.service"
NAME = "qinglong-dispatcher"
PREFIX = f"/opt/{NAME}"
STATE = f"/var/lib/{NAME}"


def pip_env() -> dict[str, str]:
    """No pip.conf, no PIP_* variables: the only wheels are the ones the steps name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "QINGLONG_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env if env is not None else pip_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def service(key: str) -> list[str]:
    """Every value of `key=` in the unit's [Service] section."""
    values = []
    section = ""
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and line.startswith(f"{key}="):
            values.append(line.partition("=")[2])
    return values


def in_root(root: Path, text: str) -> str:
    """A path or command of the unit, moved under the fake root."""
    return text.replace(PREFIX, f"{root}{PREFIX}").replace(STATE, f"{root}{STATE}")


def test_the_wheel_and_its_lock_install_offline_into_a_venv_that_the_unit_runs(
    tmp_path: Path,
) -> None:
    # 1. The release artefacts (on a machine that reaches the package index).
    dist = tmp_path / "dist"
    run("make", "--no-print-directory", "dist", f"DIST={dist}", f"VENV={sys.prefix}")
    (wheel,) = dist.glob("qinglong_dispatcher-*-py3-none-any.whl")
    # The peers' harness stays in the checkout (bench/peers): a deployment installs no peer.
    shipped = zipfile.ZipFile(wheel).namelist()
    assert "qinglong_dispatcher/bench/runner.py" in shipped
    assert not [n for n in shipped if n.startswith("bench/") or "/peers/" in n]
    lock = dist / "requirements.lock"
    assert "--hash=sha256:" in lock.read_text(encoding="utf-8")

    # 2. A clean venv at /opt/qinglong-dispatcher, filled from the artefacts alone.
    root = tmp_path / "root"
    venv = root / PREFIX.lstrip("/")
    venv.parent.mkdir(parents=True)
    run(sys.executable, "-m", "venv", venv)
    pip = venv / "bin" / "pip"
    wheelhouse = dist / "wheelhouse"
    offline = ("--no-index", "--find-links", wheelhouse, "--require-hashes", "--no-deps")
    run(pip, "install", *offline, "--requirement", lock)
    run(pip, "install", "--no-index", "--no-deps", wheel)
    run(pip, "check")
    assert run(venv / "bin" / NAME, "--version").strip() == f"{NAME} 0.1.0"
    installed = run(pip, "list", "--format=freeze")
    assert "pytest" not in installed  # the runtime closure only
    assert "asyncpg" not in installed  # the cluster extra's driver: the edge goes without

    # 3. The unit, the site settings, and the state directory as DynamicUser lays it out.
    units = root / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / UNIT.name).write_bytes(UNIT.read_bytes())
    (units / UNIT.name).chmod(0o644)
    port = daemon.free_port()
    env_file = root / "etc" / NAME / "env"
    env_file.parent.mkdir()
    example = (SYSTEMD / "env.example").read_text(encoding="utf-8")
    env_file.write_text(f"{example}QINGLONG_METRICS_PORT={port}\n", encoding="utf-8")
    env_file.chmod(0o640)
    # The plan key ring, made at install where the unit's LoadCredential= reads it.
    (credential,) = service("LoadCredential")
    name, _, source = credential.partition(":")
    ring = root / source.lstrip("/")
    ring.parent.mkdir(mode=0o700)
    run(venv / "bin" / NAME, "keys", "generate", "--out", ring)
    private = root / "var" / "lib" / "private"
    private.mkdir(parents=True, mode=0o700)
    for folder in service("StateDirectory")[0].split():
        (private / folder).mkdir(mode=0o700)
    (root / STATE.lstrip("/")).symlink_to(f"private/{NAME}")
    install_check = ["sh", str(SYSTEMD / "install-check.sh"), "--root", str(root)]
    run(*install_check)

    # 4. What systemd would run: ExecStartPre, then ExecStart, with the unit's environment.
    unit_env = dict(e.partition("=")[::2] for e in service("Environment"))
    unit_env["QINGLONG_METRICS_PORT"] = str(port)  # from the settings file
    env = {**pip_env(), **{k: in_root(root, v) for k, v in unit_env.items()}}
    # systemd hands the credential over as a private copy in $CREDENTIALS_DIRECTORY.
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / name).write_bytes(ring.read_bytes())
    (credentials / name).chmod(0o400)
    env["CREDENTIALS_DIRECTORY"] = str(credentials)
    workdir = Path(in_root(root, service("WorkingDirectory")[0]))
    (pre,) = service("ExecStartPre")
    migrated = run(*shlex.split(in_root(root, pre)), env=env, cwd=workdir)
    assert "registered plan key(s) k" in migrated  # plans are sealed from the first one
    (start,) = service("ExecStart")
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            shlex.split(in_root(root, start)),
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            umask=int(service("UMask")[0], 8),
        )
    try:
        try:
            daemon.wait_until(lambda: daemon.ready(port) or process.poll() is not None, 60)
        finally:
            log_text = log_path.read_text(encoding="utf-8", errors="replace")
        assert process.poll() is None, log_text
        status, body = daemon.get(port, "/readyz")
        assert status == 200, body
        database = Path(in_root(root, unit_env["QINGLONG_DATABASE_URL"].removeprefix("sqlite:///")))
        assert database.stat().st_mode & 0o777 == 0o600
        assert database.resolve().parent == private / NAME

        # 5. install-check.sh --running: the unit, the venv, the state directory, /readyz.
        checked = run(*install_check, "--running")
        assert f"{NAME} 0.1.0 in {root}{PREFIX}" in checked
        assert f"ok    {database}, mode 600" in checked
        assert f"ok    127.0.0.1:{port}/readyz answers 200: the daemon is ready" in checked
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    assert code == 0, log_path.read_text(encoding="utf-8", errors="replace")

    # 6. Stopped, the same check says so.
    stopped = subprocess.run(
        [*install_check, "--running"], capture_output=True, text=True, timeout=60, check=False
    )
    assert stopped.returncode == 1
    assert f"FAIL  nothing listens on 127.0.0.1:{port}" in stopped.stdout
