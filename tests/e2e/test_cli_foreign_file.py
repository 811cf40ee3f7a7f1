"""A SQLite file that another program owns is refused by every command, byte for byte
untouched: `migrate` never turns someone else's database into ours."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import error_lines, run_cli


def _foreign(path: Path) -> bytes:
    """A small database of another program (rollback journal, its own tables)."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("CREATE TABLE tags (note_id INTEGER, tag TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
        conn.commit()
    finally:
        conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("command", [("migrate",), ("migrate", "--check"), ("status",), ("run",)])
def test_another_programs_database_is_refused_in_one_line_and_left_byte_for_byte(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    database = tmp_path / "theirs.db"
    before = _foreign(database)
    result = run_cli(*command, cwd=tmp_path, env={"QINGLONG_DATABASE_URL": f"sqlite:///{database}"})
    assert result.returncode == 1, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "is not a qinglong-dispatcher database" in lines[0]
    assert "notes, tags" in lines[0]
    assert "Traceback" not in result.stderr
    assert database.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]


@pytest.mark.slow
def test_an_empty_file_is_still_migrated(tmp_path: Path) -> None:
    database = tmp_path / "empty.db"
    database.touch()
    env = {"QINGLONG_DATABASE_URL": f"sqlite:///{database}"}
    assert run_cli("migrate", cwd=tmp_path, env=env).returncode == 0
    assert run_cli("migrate", "--check", cwd=tmp_path, env=env).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_a_file_in_a_folder_the_user_may_not_enter_is_named_in_one_line(tmp_path: Path) -> None:
    """Another OS user than the file's owner (a mistyped `sudo -u`) gets one line naming the
    path and exit 69, never a traceback or an internal error."""
    folder = tmp_path / "private"
    folder.mkdir()
    database = f"sqlite:///{folder / 'qinglong.db'}"
    assert (
        run_cli("--profile", "edge", "--database", database, "migrate", cwd=tmp_path).returncode
        == 0
    )
    folder.chmod(0o700)
    tmp_path.chmod(0o755)
    script = Path(sys.executable).parent / "qinglong-dispatcher"
    as_nobody = subprocess.run(
        [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            str(script),
            "--profile",
            "edge",
            "--database",
            database,
            "status",
        ],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert as_nobody.returncode == 69, as_nobody.stderr
    assert error_lines(as_nobody.stderr) == [
        f"qinglong-dispatcher: error: SQLite file {folder / 'qinglong.db'} cannot be reached "
        "(Permission denied)"
    ]
