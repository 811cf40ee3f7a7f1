"""The log format follows stderr: console lines on a terminal, JSON lines into a pipe."""

from __future__ import annotations

import json
import os
import select
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import SCRIPT, run_cli


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    return tmp_path


def _submit(workdir: Path) -> None:
    args = ("submit", "run-create", "--project", "p1", "--task", "t1", "--revision", "1")
    assert run_cli(*args, cwd=workdir).returncode == 0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env.update(extra)
    return env


def _tick_on_a_terminal(workdir: Path, env: dict[str, str]) -> str:
    """`tick --once` with its stderr on a real pseudo-terminal; what the terminal showed."""
    controller, terminal = os.openpty()
    try:
        with subprocess.Popen(
            [str(SCRIPT), "tick", "--once"],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
        ) as process:
            os.close(terminal)
            shown = b""
            while True:
                ready, _, _ = select.select([controller], [], [], 30)
                assert ready, "the terminal stayed silent"
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            assert process.wait(timeout=30) == 0
    finally:
        os.close(controller)
    return shown.decode("utf-8", "replace")


@pytest.mark.slow
def test_a_terminal_gets_console_lines(workdir: Path) -> None:
    _submit(workdir)
    shown = _tick_on_a_terminal(workdir, _env())
    lines = [line for line in shown.splitlines() if "dispatch.page_committed" in line]
    assert lines, shown
    assert not lines[0].lstrip().startswith("{")


def test_an_explicit_setting_wins_on_a_terminal(workdir: Path) -> None:
    _submit(workdir)
    shown = _tick_on_a_terminal(workdir, _env(QINGLONG_LOG_FORMAT="json"))
    (line,) = [line for line in shown.splitlines() if "dispatch.page_committed" in line]
    assert json.loads(line)["event"] == "dispatch.page_committed"


def test_a_pipe_gets_json_lines(workdir: Path) -> None:
    _submit(workdir)
    done = run_cli("tick", "--once", cwd=workdir)  # stderr is a pipe
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "dispatch.page_committed" in line]
    assert json.loads(line)["event"] == "dispatch.page_committed"
