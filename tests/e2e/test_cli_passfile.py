"""No password on the command line: against a server that asks for one, the CLI takes it
from the libpq passfile (`PGPASSFILE`, else `~/.pgpass`), also behind
`QINGLONG_DATABASE_URL_FILE`; without it, one line and exit 69, never the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import pg_password
from tests.support.cli import error_lines, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _passfile(path: Path, server: pg_password.PasswordServer) -> Path:
    path.write_text(f"127.0.0.1:{server.port}:*:postgres:{server.password}\n")
    path.chmod(0o600)  # libpq ignores a passfile others may read
    return path


def test_the_password_comes_from_the_passfile_and_never_from_the_command_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with pg_password.password_server() as server:
        base = {"HOME": str(home), "QINGLONG_PROFILE": "cluster"}
        without = run_cli("--database", server.url(), "migrate", cwd=tmp_path, env=base)
        assert without.returncode == 69, without.stderr
        assert len(error_lines(without.stderr)) == 1
        passfile = _passfile(tmp_path / "pgpass", server)
        with_file = {**base, "PGPASSFILE": str(passfile)}
        migrated = run_cli("--database", server.url(), "migrate", cwd=tmp_path, env=with_file)
        assert migrated.returncode == 0, migrated.stderr
        assert "applied" in migrated.stdout
        # The default place, and a URL read from a file (so not in the environment either).
        _passfile(home / ".pgpass", server)
        url_file = tmp_path / "url"
        url_file.write_text(server.url() + "\n")
        health = run_cli(
            "health", cwd=tmp_path, env={**base, "QINGLONG_DATABASE_URL_FILE": str(url_file)}
        )
        assert health.returncode == 0, health.stderr
        for result in (without, migrated, health):
            assert server.password not in result.stdout + result.stderr
