"""`make run` installs only the runtime dependencies (the edge daemon); `make bench` the
`cluster` extra too (asyncpg); the checking targets the `test` and `cluster` extras; each makes
its own venv on a fresh clone (read from make's dry run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path: Path, target: str) -> list[str]:
    """What `make TARGET` would run in a fresh clone (no venv yet), one command a line."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    done = subprocess.run(
        ["make", "-n", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if "pip install" in line and "--upgrade pip" not in line]


def test_make_run_on_a_fresh_clone_makes_a_venv_and_installs_only_the_runtime(
    tmp_path: Path,
) -> None:
    lines = _dry_run(tmp_path, "run")
    assert any("-m venv .venv" in line for line in lines)
    assert _installs(lines) == [".venv/bin/python -m pip install --quiet -e ."]
    assert not any("[test" in line or "cluster]" in line for line in lines)
    assert any(line.endswith(" run") and "qinglong-dispatcher" in line for line in lines)


@pytest.mark.parametrize("target", ["test", "pytest", "lint", "typecheck", "test-slow"])
def test_the_checking_targets_on_a_fresh_clone_install_every_extra_the_tests_use(
    tmp_path: Path, target: str
) -> None:
    lines = _dry_run(tmp_path, target)
    assert any("-m venv .venv" in line for line in lines)
    assert _installs(lines) == [
        ".venv/bin/python -m pip install --quiet -e '.[test,cluster,mcp,oidc,otel]'"
    ]


@pytest.mark.parametrize("target", ["bench", "bench-peers"])
def test_the_benches_on_a_fresh_clone_install_the_cluster_extra_and_not_the_tests(
    tmp_path: Path, target: str
) -> None:
    lines = _dry_run(tmp_path, target)
    assert any("-m venv .venv" in line for line in lines)
    assert _installs(lines) == [".venv/bin/python -m pip install --quiet -e '.[cluster]'"]
    assert any("--database postgresql://" in line for line in lines)
