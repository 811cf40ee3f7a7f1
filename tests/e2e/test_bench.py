"""A short `bench` run per profile: the report's exact shape; every dispatch verified.

No timing is asserted here: speed targets live in the benchmark's own figures (README).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.stores import pg_url

KEYS = {
    "raw_commits_per_s",
    "raw_commits_per_s_stdlib",
    "enqueue_per_s",
    "dispatch_per_s",
    "ratio_to_raw_commit",
    "commits_per_dispatch",
    "latency_ms",
    "cpu_s_per_1000",
    "rss_mib_peak",
    "scan_cost_ratio",
    "idle",
}
SHORT = ["--dispatches", "200", "--scan-rows", "10000", "--idle-seconds", "2", "--json"]


def check(report: dict[str, object], *, stdlib: bool) -> None:
    assert set(report) == KEYS
    latency, idle = report["latency_ms"], report["idle"]
    assert isinstance(latency, dict)
    assert isinstance(idle, dict)
    assert set(latency) == {
        "start_p50",
        "start_p99",
        "complete_p50",
        "complete_p99",
    }
    assert set(idle) == {"cpu_percent", "rss_mib"}
    assert (report["raw_commits_per_s_stdlib"] is not None) is stdlib
    for key in KEYS - {"latency_ms", "idle", "raw_commits_per_s_stdlib"}:
        value = report[key]
        assert isinstance(value, int | float)
        assert value > 0, key
    # Every dispatch needs its start barrier and its effect: at least two commits each.
    commits = report["commits_per_dispatch"]
    assert isinstance(commits, int | float)
    assert commits >= 2


@pytest.mark.slow
def test_edge_bench_reports_every_figure(tmp_path: Path) -> None:
    result = run_cli("bench", "--profile", "edge", *SHORT, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    check(json.loads(lines[0]), stdlib=True)


@pytest.mark.slow
@pytest.mark.postgres
def test_cluster_bench_reports_every_figure(tmp_path: Path) -> None:
    url = pg_url("postgres")
    result = run_cli(
        "bench",
        "--profile",
        "cluster",
        "--database",
        url,
        "--replicas",
        "2",
        *SHORT,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    check(json.loads(result.stdout), stdlib=False)
