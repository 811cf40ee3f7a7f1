"""`QINGLONG_DATABASE_URL_FILE`: the database URL (and its password) read from a file, never
from a command line; conflicts and unreadable files are one line and exit 78, never showing
the password."""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.daemon import free_port, ready, running, wait_until

SECRET = "s3cret-in-the-file"
FILE_ENV = "QINGLONG_DATABASE_URL_FILE"


def _refused(result_stderr: str, code: int) -> str:
    assert code == 78, (code, result_stderr)
    lines = error_lines(result_stderr)
    assert len(lines) == 1, result_stderr
    assert "Traceback" not in result_stderr
    assert SECRET not in result_stderr
    return lines[0]


@pytest.mark.slow
def test_an_edge_url_file_with_a_trailing_newline_is_used_end_to_end(tmp_path: Path) -> None:
    database = tmp_path / "data" / "q.db"
    url_file = tmp_path / "url"
    url_file.write_text(f"sqlite:///{database}\n")
    env = {FILE_ENV: str(url_file)}
    assert run_cli("migrate", cwd=tmp_path, env=env).returncode == 0
    assert database.is_file()
    json_out(
        run_cli(
            "submit",
            "run-create",
            "--project",
            "p",
            "--task",
            "t",
            "--revision",
            "1",
            "--json",
            cwd=tmp_path,
            env=env,
        )
    )
    assert (
        json_out(run_cli("status", "--json", cwd=tmp_path, env=env))["executions"]["pending"] == 1
    )


@pytest.mark.parametrize("other", ["env", "flag"])
def test_a_url_file_beside_another_url_is_a_configuration_error(tmp_path: Path, other: str) -> None:
    url_file = tmp_path / "url"
    url_file.write_text(f"postgresql://qinglong:{SECRET}@127.0.0.1/x\n")
    env = {FILE_ENV: str(url_file)}
    args: tuple[str, ...] = ("health",)
    if other == "env":
        env["QINGLONG_DATABASE_URL"] = "sqlite:///q.db"
    else:
        args = ("--database", "sqlite:///q.db", "health")
    result = run_cli(*args, cwd=tmp_path, env=env)
    line = _refused(result.stderr, result.returncode)
    assert FILE_ENV in line
    assert "contradict" in line


@pytest.mark.parametrize("case", ["missing", "directory", "two-lines", "empty", "dev-zero"])
def test_an_unreadable_url_file_is_one_line_naming_it_and_never_its_password(
    tmp_path: Path, case: str
) -> None:
    path = tmp_path / "url"
    if case == "directory":
        path.mkdir()
    elif case == "two-lines":
        path.write_text(f"postgresql://qinglong:{SECRET}@127.0.0.1/x\nsecond line\n")
    elif case == "empty":
        path.write_text("\n")
    elif case == "dev-zero":
        path = Path("/dev/zero")
    result = run_cli("health", cwd=tmp_path, env={FILE_ENV: str(path)}, timeout=30)
    line = _refused(result.stderr, result.returncode)
    assert f"{FILE_ENV} {path}: cannot be read" in line


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


@pytest.mark.postgres
async def test_a_daemon_started_with_a_url_file_shows_no_password_in_its_cmdline_or_environ(
    database: str, tmp_path: Path
) -> None:
    url = stores.runtime_url(database)  # a login with a password, as a production one
    password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    url_file = tmp_path / "url"
    url_file.write_text(url + "\n")
    url_file.chmod(0o600)
    port = free_port()
    env = {
        "QINGLONG_PROFILE": "cluster",
        FILE_ENV: str(url_file),
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port),
        "QINGLONG_CADENCE_SECONDS": "0.2",
    }
    with running(tmp_path, env, name="url-file") as daemon:
        await anyio.to_thread.run_sync(lambda: wait_until(functools.partial(ready, port)))
        cmdline = await anyio.Path(f"/proc/{daemon.pid}/cmdline").read_bytes()
        environ = await anyio.Path(f"/proc/{daemon.pid}/environ").read_bytes()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0, daemon.stderr[-2000:]
    assert password.encode() not in cmdline
    assert password.encode() not in environ
    assert password not in daemon.stderr  # nor in its logs
