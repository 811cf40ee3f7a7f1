"""asyncpg is the `cluster` extra: an install without it runs the edge profile whole, and a
cluster command says in one line which extra it needs (exit 78), never a traceback.

A fresh venv per test would cost a minute; instead the command runs in a new process whose
import system answers for asyncpg exactly what a missing package answers
(`ModuleNotFoundError`, name `asyncpg`), and notes every time it was asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# The console script, behind a finder that has no asyncpg. Each time something asks for it,
# a line goes to the file named by argv[1].
WITHOUT_ASYNCPG = """
import sys

class NoAsyncpg:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "asyncpg":
            return None
        with open(ASKED, "a") as out:
            out.write(name + "\\n")
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

ASKED = sys.argv.pop(1)
sys.meta_path.insert(0, NoAsyncpg())
sys.argv[0] = "qinglong-dispatcher"
from qinglong_dispatcher import console
sys.exit(console.main())
"""


def _without_asyncpg(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_ASYNCPG, str(tmp_path / "asked"), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _asked(tmp_path: Path) -> list[str]:
    asked = tmp_path / "asked"
    return asked.read_text().split() if asked.exists() else []


def test_the_edge_profile_migrates_submits_and_ticks_without_asyncpg(tmp_path: Path) -> None:
    edge = ["--profile", "edge", "--database", f"sqlite:///{tmp_path / 'q.db'}"]
    for argv in (
        ["migrate"],
        ["submit", "run-create", "--project", "demo", "--task", "build", "--revision", "1"],
        ["tick", "--drain"],
        ["status", "--json"],
    ):
        done = _without_asyncpg(tmp_path, *edge, *argv)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["executions"]["succeeded"] == 1
    assert _asked(tmp_path) == []  # nothing on the edge path even looked for asyncpg


@pytest.mark.parametrize(
    "command",
    [["migrate"], ["status"], ["bench", "--dispatches", "10"]],
    ids=["migrate", "status", "bench"],
)
def test_a_cluster_command_without_asyncpg_names_the_extra_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    # No server is reached: the driver is missing before any connection is tried.
    database = "postgresql://postgres@127.0.0.1:1/qinglong"
    done = _without_asyncpg(tmp_path, "--profile", "cluster", "--database", database, *command)
    assert done.returncode == 78, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "qinglong-dispatcher[cluster]" in lines[0]
    assert _asked(tmp_path)[:1] == ["asyncpg"]  # the finder was reached: the test can fail
