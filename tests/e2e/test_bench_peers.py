"""`python -m bench.peers` with a short count: the table's six rows (each peer's no-op job, then
its job doing equal work), each with positive rates for both sides and the ratio ours / peer;
the equal-work runs counted one Run, one receipt and one audit row per job. The peers' venv is
made in the test's own folder from PyPI (reachable in CI: nothing here skips for the network).
Usage and configuration errors: one line, exit 2 or 78.

No timing is asserted: the measured ratios live in docs/performance.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers import installation
from tests.support.cli import error_lines
from tests.support.stores import pg_url

ROOT = Path(__file__).resolve().parents[2]

DISPATCHES = 300
ROWS = [
    "edge (SQLite, `run.create`) vs huey (SqliteHuey, 1 worker)",
    "cluster R=4 (PostgreSQL) vs pgqueuer default",
    "cluster R=4 vs pgqueuer `batch_size=100`",
    "edge vs huey, equal work (its job: Run, receipt, audit row in one transaction)",
    "cluster R=4 vs pgqueuer default, equal work (its job: Run, receipt, audit row in one "
    "transaction)",
    "cluster R=4 vs pgqueuer `batch_size=100`, equal work (its job: Run, receipt, audit row in "
    "one transaction)",
]
EQUAL_RUNS = {"huey_equal", "pgqueuer_equal", "pgqueuer_batch_100_equal"}


def run_peers(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m bench.peers ARGS` from the checkout (outside the wheel), run in `cwd`;
    environment without stray QINGLONG_ variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    clean.update({"PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "bench.peers", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_compare_peers_reports_six_rows_of_positive_rates(tmp_path: Path) -> None:
    venv = tmp_path / "peers-venv"
    result = run_peers(
        "--database",
        pg_url("postgres"),
        "--dispatches",
        str(DISPATCHES),
        "--json",
        cwd=tmp_path,
        env={installation.VENV_VARIABLE: str(venv)},
        timeout=420,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    entry = json.loads(lines[0])["peers"]
    assert entry["dispatches"] == DISPATCHES
    assert entry["versions"] == installation.PINS
    assert entry["rounds"] == 1
    assert [row["row"] for row in entry["rows"]] == ROWS
    for row in entry["rows"]:
        assert row["ours_per_s"] > 0, row
        assert row["peer_per_s"] > 0, row
        assert row["ratio"] == pytest.approx(row["ours_per_s"] / row["peer_per_s"], abs=0.002)
        assert (row["ratios"], row["round"]) == ([row["ratio"]], 1)
    (measured,) = entry["by_round"]
    assert measured["ours"]["edge"]["replicas"] == 1
    assert measured["ours"]["cluster"]["replicas"] == 4
    # Steady rates on both sides: ours from the completion times the store recorded.
    assert entry["rows"][0]["ours_per_s"] == measured["ours"]["edge"]["steady_per_s"]
    assert entry["rows"][1]["ours_per_s"] == measured["ours"]["cluster"]["steady_per_s"]
    # The same run of ours beside both of a peer's jobs.
    assert entry["rows"][3]["ours_per_s"] == entry["rows"][0]["ours_per_s"]
    assert entry["rows"][4]["ours_per_s"] == entry["rows"][5]["ours_per_s"]
    assert entry["rows"][4]["ours_per_s"] == entry["rows"][1]["ours_per_s"]
    assert all(measured["ours"][side]["dispatch_per_s"] > 0 for side in ("edge", "cluster"))
    runs = measured["peer_runs"]
    assert set(runs) == {"huey", "pgqueuer", "pgqueuer_batch_100"} | EQUAL_RUNS
    assert all(run["jobs"] == DISPATCHES for run in runs.values())
    # The equal-work jobs wrote their three rows each, counted after the drain; the no-op
    # jobs wrote none.
    for name, run in runs.items():
        if name in EQUAL_RUNS:
            assert run["work"] == "equal"
            assert run["verified"] == {
                "runs": DISPATCHES,
                "receipts": DISPATCHES,
                "audit": DISPATCHES,
            }
        else:
            assert (run["work"], run["verified"]) == ("noop", None)
    # The venv went where the variable said, stamped with the pins; nothing under var/.
    assert (venv / installation.STAMP).read_text("utf-8").split() == installation.requirements()
    assert not (tmp_path / "var").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--database", "sqlite:///x.db"],
            78,
            "the cluster profile needs postgresql://",
        ),
        (
            ["--database", "postgresql://postgres@127.0.0.1:5432/postgres", "--dispatches", "5"],
            2,
            "--dispatches must be ≥ 100",
        ),
        (
            ["--database", "postgresql://postgres@127.0.0.1:5432/postgres", "--rounds", "0"],
            2,
            "--rounds must be 1–9",
        ),
    ],
)
def test_compare_peers_usage_errors_are_one_line(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = run_peers(*args, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert not (tmp_path / "var").exists()
