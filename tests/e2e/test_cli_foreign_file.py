"""A SQLite file that another program owns is refused by every command, byte for byte
untouched: `migrate` never turns someone else's database into ours."""

from __future__ import annotations

import sqlite3
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


def test_an_empty_file_is_still_migrated(tmp_path: Path) -> None:
    database = tmp_path / "empty.db"
    database.touch()
    env = {"QINGLONG_DATABASE_URL": f"sqlite:///{database}"}
    assert run_cli("migrate", cwd=tmp_path, env=env).returncode == 0
    assert run_cli("migrate", "--check", cwd=tmp_path, env=env).returncode == 0
