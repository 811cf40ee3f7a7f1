"""A short `bench` run per profile: the report's exact shape; every dispatch verified. The bench's
own HTTP receiver: one execution per key, a same-key resend answered from its store.

No timing is asserted here: speed targets live in the benchmark's own figures (docs/performance.md).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher.bench import mixed_http, mixed_mcp, runner
from qinglong_dispatcher.config.settings import load_settings
from tests.support.cli import run_cli
from tests.support.stores import pg_url

KEYS = {
    "raw_commits_per_s",
    "raw_commits_per_s_stdlib",
    "enqueue_per_s",
    "submit_one_per_s",
    "dispatch_per_s",
    "ratio_to_raw_commit",
    "ratio_to_raw_commit_stdlib",
    "commits_per_dispatch",
    "latency_ms",
    "wakeup_latency_ms",
    "cpu_s_per_1000",
    "rss_mib_peak",
    "costs_per_dispatch",
    "scan_cost_ratio",
    "idle",
    "sealed",
    "mixed",
    "mixed_http",
    "mixed_mcp",
    "api",
    "approval_policy",
    "notifications",
}
NESTED = {
    "latency_ms",
    "wakeup_latency_ms",
    "idle",
    "sealed",
    "mixed",
    "mixed_http",
    "mixed_mcp",
    "costs_per_dispatch",
    "api",
    "approval_policy",
    "notifications",
}
API_DISPATCHES = 60
API_KEYS = {
    "dispatches",
    "clients",
    "requests_per_s",
    "request_p50_ms",
    "request_p99_ms",
    "approved_per_s",
    "succeeded_per_s",
    "ratio_to_enqueue_per_s",
}
NULL_ON_POSTGRES = {"raw_commits_per_s_stdlib", "ratio_to_raw_commit_stdlib"}
MIXED_KEYS = {
    "dispatches",
    "run_create",
    "tool_invoke",
    "succeeded",
    "runs_created",
    "tool_steps_succeeded",
    "files_written",
    "verified",
    "dispatch_per_s",
    "commits_per_dispatch",
    "cpu_s_per_1000",
    "rss_mib_peak",
    "costs_per_dispatch",
}
MIXED_HTTP_KEYS = {
    "dispatches",
    "run_create",
    "http_request",
    "receivers",
    "succeeded",
    "runs_created",
    "keys_executed_once",
    "receiver_requests",
    "receiver_replayed",
    "verified",
    "dispatch_per_s",
    "ratio_to_dispatch_per_s",
    "commits_per_dispatch",
    "cpu_s_per_1000",
    "rss_mib_peak",
    "send_p50_ms",
    "send_p99_ms",
    "execute_p50_ms",
    "execute_p99_ms",
    "receiver_rss_mib",
    "receiver_cpu_s_per_1000",
    "costs_per_dispatch",
}
MIXED_MCP_KEYS = {
    "dispatches",
    "run_create",
    "mcp_call",
    "succeeded",
    "runs_created",
    "keys_called_once",
    "server_calls",
    "server_sessions",
    "verified",
    "dispatch_per_s",
    "ratio_to_dispatch_per_s",
    "commits_per_dispatch",
    "cpu_s_per_1000",
    "rss_mib_peak",
    "sessions_per_call",
    "execute_p50_ms",
    "execute_p99_ms",
    "costs_per_dispatch",
}
MIXED_DISPATCHES = 150
MCP_DISPATCHES = 20
"""Two mcp.call: each is two stdio sessions, a Python start each."""
SHORT = [
    "--dispatches",
    "200",
    "--mixed-dispatches",
    str(MIXED_DISPATCHES),
    "--mcp-dispatches",
    str(MCP_DISPATCHES),
    "--api-dispatches",
    str(API_DISPATCHES),
    "--scan-rows",
    "10000",
    "--idle-seconds",
    "2",
    "--json",
]


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
    for key in NULL_ON_POSTGRES:
        assert (report[key] is not None) is stdlib, key
    for key in KEYS - NESTED - (set() if stdlib else NULL_ON_POSTGRES):
        value = report[key]
        assert isinstance(value, int | float)
        assert value > 0, key
    # run.create pages commit their claim and one page transaction (start, effect, completion
    # together): two commits a page, far below one a dispatch.
    commits = report["commits_per_dispatch"]
    assert isinstance(commits, int | float)
    assert 0 < commits < 1
    sealed = report["sealed"]
    assert isinstance(sealed, dict)
    assert set(sealed) == {
        "enqueue_per_s",
        "dispatch_per_s",
        "ratio_to_dispatch_per_s",
        "cpu_s_per_1000",
        "cpu_s_per_1000_clear",
    }
    assert all(isinstance(v, int | float) and v > 0 for v in sealed.values()), sealed
    check_mixed(report["mixed"], dispatches=MIXED_DISPATCHES)
    check_mixed_http(
        report["mixed_http"], dispatches=MIXED_DISPATCHES, run_create=report["dispatch_per_s"]
    )
    check_mixed_mcp(
        report["mixed_mcp"], dispatches=MCP_DISPATCHES, run_create=report["dispatch_per_s"]
    )
    check_wakeup(report["wakeup_latency_ms"], cluster=not stdlib)
    check_api(report["api"], enqueue=report["enqueue_per_s"], edge=stdlib)
    check_costs(report["costs_per_dispatch"], cluster=not stdlib, pure=True)
    assert isinstance(report["mixed"], dict)
    check_costs(report["mixed"]["costs_per_dispatch"], cluster=not stdlib, pure=False)
    assert isinstance(report["mixed_http"], dict)
    check_costs(report["mixed_http"]["costs_per_dispatch"], cluster=not stdlib, pure=False)
    assert isinstance(report["mixed_mcp"], dict)
    check_costs(report["mixed_mcp"]["costs_per_dispatch"], cluster=not stdlib, pure=False)


def check_api(entry: object, *, enqueue: object, edge: bool) -> None:
    """Edge: submit and approve over a daemon's HTTP API, every dispatch succeeded; cluster:
    null (the phase needs principal roles, which are server-wide)."""
    if not edge:
        assert entry is None
        return
    assert isinstance(entry, dict)
    assert set(entry) == API_KEYS
    assert entry["dispatches"] == API_DISPATCHES
    assert all(isinstance(v, int | float) and v > 0 for v in entry.values()), entry
    assert entry["request_p50_ms"] <= entry["request_p99_ms"]
    assert entry["succeeded_per_s"] <= entry["approved_per_s"] * 1.01
    assert isinstance(enqueue, int | float)
    assert entry["ratio_to_enqueue_per_s"] == pytest.approx(
        entry["approved_per_s"] / enqueue, abs=0.002
    )


STORE_COSTS = {
    "rows_changed",
    "bytes_written",
    "pages_written",
    "worker_cpu_ms",
    "worker_wall_ms",
    "worker_share_of_wall",
    "worker_share_of_cpu",
}
SERVER_COSTS = {
    "wal_bytes",
    "wal_records",
    "wal_fpi",
    "server_commits",
    "blocks_touched",
    "rows_written",
    "rows",
    "hot_ratio",
    "tables",
    "function_self_ms",
    "functions",
    "statements",
    "top_statements",
}
EXECUTIONS = "approved_action_dispatch_executions"


def check_costs(costs: object, *, cluster: bool, pure: bool) -> None:
    """What a dispatch cost, per dispatch: on SQLite the replicas' writes and worker-thread
    time, on PostgreSQL the server's WAL, rows per table, function time (the bench logs in as
    a superuser, so `track_functions` is on) and, without `pg_stat_statements`, no statements.
    A run.create passes (decision 0055) and writes six rows: its execution once, one ledger
    line, the Run, its attempt, its event and the receipt; a mixed drain's other actions take
    the claim, start and completion, three writes of their execution each."""
    assert isinstance(costs, dict)
    if not cluster:
        assert set(costs) == STORE_COSTS
        if pure:
            assert costs["rows_changed"] == pytest.approx(6.0, abs=0.5)
        assert costs["rows_changed"] >= 5.5
        assert costs["pages_written"] == pytest.approx(costs["bytes_written"] / 4096, rel=0.01)
        assert costs["pages_written"] > 0.1
        assert costs["worker_cpu_ms"] > 0
        assert costs["worker_wall_ms"] > 0
        assert 0 < costs["worker_share_of_wall"] <= 1
        assert 0 < costs["worker_share_of_cpu"] <= 1
        return
    assert set(costs) == SERVER_COSTS
    assert costs["wal_bytes"] > 0
    assert costs["wal_records"] > 0
    assert costs["server_commits"] > 0
    assert costs["blocks_touched"] > 0
    executions = costs["tables"][EXECUTIONS]
    writes = costs["functions"]["check_execution_change"]["calls"]
    if pure:
        assert executions["upd"] == pytest.approx(1.0, abs=0.2)
        assert writes == pytest.approx(1.0, abs=0.2)
    else:
        assert 1.0 <= executions["upd"] <= 3.0
        assert writes == pytest.approx(executions["upd"], abs=0.2)
    assert executions["ins"] == 0
    assert 0 <= costs["hot_ratio"] <= 1
    assert 0 <= executions["hot_ratio"] <= 1
    assert costs["rows"]["ins"] >= 4  # a passage: its line, the Run, attempt, event, receipt
    if pure:
        assert costs["rows_written"] == pytest.approx(6.0, abs=0.5)
    assert costs["function_self_ms"] > 0
    if costs["statements"] is None:
        assert costs["top_statements"] is None
    else:
        assert costs["statements"] > 0
        assert costs["top_statements"]


def check_wakeup(wakeup: object, *, cluster: bool) -> None:
    """Cluster: the trickle at the profile's own 1 s cadence, wake-up on and off; edge: null."""
    if not cluster:
        assert wakeup is None
        return
    assert isinstance(wakeup, dict)
    assert set(wakeup) == {
        "cadence_s",
        "start_p50",
        "start_p99",
        "complete_p50",
        "complete_p99",
        "start_p50_cadence_only",
        "start_p99_cadence_only",
    }
    assert wakeup["cadence_s"] == 1.0
    for key, value in wakeup.items():
        assert isinstance(value, int | float), key
        assert value >= 0, key


def check_mixed(mixed: object, *, dispatches: int) -> None:
    """Nine in ten run.create, one in ten tool.invoke; each one verified by the bench."""
    assert isinstance(mixed, dict)
    assert set(mixed) == MIXED_KEYS
    tools = dispatches // 10
    assert mixed["verified"] is True
    assert mixed["dispatches"] == mixed["succeeded"] == dispatches
    assert mixed["run_create"] == mixed["runs_created"] == dispatches - tools
    assert mixed["tool_invoke"] == mixed["tool_steps_succeeded"] == mixed["files_written"] == tools
    for key in ("dispatch_per_s", "commits_per_dispatch", "cpu_s_per_1000", "rss_mib_peak"):
        value = mixed[key]
        assert isinstance(value, int | float)
        assert value > 0, key


def check_mixed_http(mixed: object, *, dispatches: int, run_create: object) -> None:
    """Nine in ten run.create, one in ten http.request: each key executed once, by as many
    requests as there were http.request dispatches (nothing resent)."""
    assert isinstance(mixed, dict)
    assert set(mixed) == MIXED_HTTP_KEYS
    https = dispatches // 10
    assert mixed["verified"] is True
    assert mixed["dispatches"] == mixed["succeeded"] == dispatches
    assert mixed["run_create"] == mixed["runs_created"] == dispatches - https
    assert mixed["http_request"] == mixed["keys_executed_once"] == https
    assert mixed["receiver_requests"] == https
    assert mixed["receiver_replayed"] == 0
    assert mixed["receivers"] == min(mixed_http.RECEIVERS, https)
    positive = ("dispatch_per_s", "ratio_to_dispatch_per_s", "commits_per_dispatch")
    for key in (*positive, "cpu_s_per_1000", "rss_mib_peak", "receiver_rss_mib"):
        value = mixed[key]
        assert isinstance(value, int | float)
        assert value > 0, key
    assert isinstance(run_create, int | float)
    assert mixed["ratio_to_dispatch_per_s"] == pytest.approx(
        mixed["dispatch_per_s"] / run_create, abs=0.002
    )
    # CPU is counted in clock ticks: a few requests may cost none that show.
    assert mixed["receiver_cpu_s_per_1000"] >= 0
    # The ledger's times are whole milliseconds: an arrival may read up to 1 ms early.
    for kind in ("send", "execute"):
        p50, p99 = mixed[f"{kind}_p50_ms"], mixed[f"{kind}_p99_ms"]
        assert -1 < p50 <= p99, kind


def check_mixed_mcp(mixed: object, *, dispatches: int, run_create: object) -> None:
    """Nine in ten run.create, one in ten mcp.call to the bench's stdio server: each key
    called once, and nothing else called; an inspect and an execute session each at least."""
    assert isinstance(mixed, dict)
    assert set(mixed) == MIXED_MCP_KEYS
    calls = dispatches // 10
    assert mixed["verified"] is True
    assert mixed["dispatches"] == mixed["succeeded"] == dispatches
    assert mixed["run_create"] == mixed["runs_created"] == dispatches - calls
    assert mixed["mcp_call"] == mixed["keys_called_once"] == mixed["server_calls"] == calls
    assert mixed["server_sessions"] >= 2 * calls
    assert mixed["sessions_per_call"] == pytest.approx(mixed["server_sessions"] / calls, abs=0.01)
    positive = ("dispatch_per_s", "ratio_to_dispatch_per_s", "commits_per_dispatch")
    for key in (*positive, "cpu_s_per_1000", "rss_mib_peak"):
        value = mixed[key]
        assert isinstance(value, int | float)
        assert value > 0, key
    assert isinstance(run_create, int | float)
    assert mixed["ratio_to_dispatch_per_s"] == pytest.approx(
        mixed["dispatch_per_s"] / run_create, abs=0.002
    )
    # A call's execute starts a server process: it cannot take under a millisecond.
    assert 0 < mixed["execute_p50_ms"] <= mixed["execute_p99_ms"]


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


def test_a_negative_mixed_batch_is_refused(tmp_path: Path) -> None:
    result = run_cli("bench", "--profile", "edge", "--mixed-dispatches", "-1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--mixed-dispatches must be ≥ 0" in result.stderr


def test_a_negative_mcp_batch_is_refused(tmp_path: Path) -> None:
    result = run_cli("bench", "--profile", "edge", "--mcp-dispatches", "-1", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--mcp-dispatches must be ≥ 0" in result.stderr


async def test_without_the_mcp_extra_the_mixed_mcp_phase_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An edge install without the extra: `mcp` cannot be found (a None entry is what
    # importlib reports as not importable); the phase is skipped before any store is made.
    assert mixed_mcp.sdk_missing() is None
    monkeypatch.setitem(sys.modules, "mcp", None)
    options = runner.Options(mcp_dispatches=30)
    entry = await runner.mixed_mcp_entry(load_settings(profile="edge"), tmp_path, options, {})
    assert entry == {
        "dispatches": 30,
        "skipped": "mcp_sdk_missing: mcp not installed (install qinglong-dispatcher[mcp])",
    }
    assert not [p async for p in anyio.Path(tmp_path).iterdir()]  # nothing made


def _post(port: int, key: str | None, body: bytes) -> tuple[int, bool]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = f'"{key}"'
        connection.request("POST", "/bench/effects", body=body, headers=headers)
        answer = connection.getresponse()
        answer.read()
        return answer.status, answer.getheader("Idempotency-Replayed") == "true"
    finally:
        connection.close()


def _alive(pid: int) -> bool:
    # The bench reaps the receiver when it stops it: once stopped, its pid is gone.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_the_bench_receiver_executes_each_key_once_and_stops_with_the_bench(
    tmp_path: Path,
) -> None:
    async with mixed_http.receiver(tmp_path) as receiver:
        sent = [
            await anyio.to_thread.run_sync(_post, receiver.port, key, body)
            for key, body in (("k1", b"{}"), ("k1", b"{}"), ("k1", b"{ }"), (None, b"{}"))
        ]
        stats = await anyio.to_thread.run_sync(mixed_http.fetch_stats, receiver.port)
    assert sent == [(201, False), (201, True), (422, False), (400, False)]
    assert stats["executed"] == {"k1": 1}
    assert (stats["requests"], stats["replayed"], stats["refused"]) == (4, 1, 2)
    assert not _alive(receiver.pid)
