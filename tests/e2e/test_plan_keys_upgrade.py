"""A SQLite file made by the release before plans at rest (its own code, checked out of this
repository's history) is migrated by this one, its clear plans sealed by `keys rotate`, proven
by `keys check`, and dispatched as they were approved."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.support.cli import json_out, run_cli

REPO = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "357cf90ea832d6dcf7c3cd63b9b800b08e97faab"
"""The last commit whose store kept every plan in clear (migration 0012 its newest)."""


def _previous_release(into: Path) -> Path:
    """That release's package, unpacked from git (no network, no install)."""
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            PREVIOUS_RELEASE,
            "qinglong_dispatcher",
            "migrations",
            "profiles",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if archive.returncode != 0:
        pytest.fail(f"the previous release is not in this clone's history: {archive.stderr!r}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _old_cli(source: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env["PYTHONPATH"] = str(source)
    return subprocess.run(
        [sys.executable, "-m", "qinglong_dispatcher", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_file_of_the_previous_release_is_sealed_by_rotate_and_runs_as_approved(
    tmp_path: Path,
) -> None:
    old = _previous_release(tmp_path / "previous")
    work = tmp_path / "work"
    work.mkdir()
    database = ["--database", f"sqlite:///{work / 'q.db'}"]
    assert _old_cli(old, work, *database, "migrate").returncode == 0
    for n in range(3):
        made = _old_cli(
            old,
            work,
            *database,
            "submit",
            "run-create",
            "--project",
            "p",
            "--task",
            f"t-{n}",
            "--revision",
            str(n),
        )
        assert made.returncode == 0, made.stderr

    ring = work / "plan-keys"
    assert run_cli("keys", "generate", "--out", str(ring), cwd=work).returncode == 0
    env = {"QINGLONG_PLAN_KEYRING_FILE": str(ring)}
    migrated = json_out(run_cli(*database, "migrate", "--json", cwd=work, env=env))
    assert 13 in migrated["applied"]  # the old release had stopped at 0012
    before = json_out(run_cli(*database, "keys", "check", "--json", cwd=work, env=env))
    assert (before["ok"], before["clear"], before["checked"]) == (True, 3, 3)
    rotated = json_out(run_cli(*database, "keys", "rotate", "--json", cwd=work, env=env))
    assert rotated == {"resealed": 3, "unreadable": 0, "remaining": 0}
    after = json_out(run_cli(*database, "keys", "check", "--json", cwd=work, env=env))
    assert (after["ok"], after["clear"], sum(after["by_key"].values())) == (True, 0, 3)
    ticked = json_out(run_cli(*database, "tick", "--drain", "--json", cwd=work, env=env))
    assert ticked["outcomes"] == {"succeeded": 3}
