"""`--version` and `--help` import none of the heavy dependencies (a new process each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("anyio", "asyncpg", "aiohttp", "structlog", "prometheus_client", "pydantic")

PROBE = """
import contextlib, io, json, sys
from qinglong_dispatcher import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = cli.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
heavy = [m for m in {heavy!r} if m in sys.modules]
print(json.dumps({{"code": code, "out": out.getvalue(), "heavy": heavy}}))
"""


@pytest.mark.parametrize("flag", ["--version", "--help", "-h"])
def test_version_and_help_import_no_heavy_module(flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), flag],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert report["heavy"] == []
    assert "qinglong-dispatcher" in report["out"]


def test_the_console_entry_prints_the_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qinglong_dispatcher", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("qinglong-dispatcher ")


# What only the daemon, the API or the bench needs: a read command must not pay for it.
DAEMON_ONLY = (
    "prometheus_client",
    "aiohttp",
    "qinglong_dispatcher.dispatching",
    "qinglong_dispatcher.lifecycle.daemon",
    "qinglong_dispatcher.lifecycle.metrics",
    "qinglong_dispatcher.bench",
    "qinglong_dispatcher.web",
)


def test_a_read_command_imports_nothing_only_the_daemon_needs(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'q.db'}"
    common = ["--profile", "edge", "--database", database]
    subprocess.run(
        [sys.executable, "-m", "qinglong_dispatcher", *common, "migrate"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=DAEMON_ONLY), *common, "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    assert json.loads(report["out"])["profile"] == "edge"
    assert report["heavy"] == []
