"""The bench's per-dispatch costs from two snapshots of the server's counters, or from the
replicas' own counters on SQLite (no database: the e2e bench test checks real runs)."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher.bench import costs

EXECUTIONS = "approved_action_dispatch_executions"


def _snapshot(*, scale: int, statements: bool) -> dict[str, Any]:
    return {
        "wal": {"bytes": 1_000 + 5_000 * scale, "records": 10 + 40 * scale, "fpi": 2},
        "database": {
            "xact_commit": 5 + scale,
            "xact_rollback": 0,
            "blks_hit": 150 * scale,
            "blks_read": 0,
        },
        "tables": {
            EXECUTIONS: {
                "ins": 0,
                "upd": 3 * scale,
                "hot_upd": scale,
                "del": 0,
                "heap_blks": 30 * scale,
                "idx_blks": 20 * scale,
            },
            "runs": {
                "ins": scale,
                "upd": 0,
                "hot_upd": 0,
                "del": 0,
                "heap_blks": 8 * scale,
                "idx_blks": 13 * scale,
            },
            "untouched": {
                "ins": 7,
                "upd": 0,
                "hot_upd": 0,
                "del": 0,
                "heap_blks": 1,
                "idx_blks": 1,
            },
        },
        "functions": {
            "check_execution_change": {
                "calls": 3 * scale,
                "total_ms": 0.09 * scale,
                "self_ms": 0.06 * scale,
            },
            "idle": {"calls": 4, "total_ms": 1.0, "self_ms": 1.0},
        },
        "statements": {
            "10:1:True": {
                "query": "UPDATE claim",
                "toplevel": True,
                "calls": 2 * scale,
                "ms": 0.1 * scale,
                "rows": 64 * scale,
                "wal_bytes": 900 * scale,
            },
            "10:2:False": {
                "query": "INSERT ledger",
                "toplevel": False,
                "calls": 3 * scale,
                "ms": 0.3 * scale,
                "rows": 3 * scale,
                "wal_bytes": 1500 * scale,
            },
        }
        if statements
        else None,
    }


def test_server_costs_are_the_difference_per_dispatch() -> None:
    before = _snapshot(scale=0, statements=True)
    after = _snapshot(scale=100, statements=True)
    got = costs.per_dispatch([before, after], [], 100)
    assert got["wal_bytes"] == 5_000
    assert got["wal_records"] == 40
    assert got["wal_fpi"] == 0
    assert got["server_commits"] == 1
    assert got["blocks_touched"] == 150
    # Tables and functions that did not move are left out.
    assert set(got["tables"]) == {EXECUTIONS, "runs"}
    assert got["tables"][EXECUTIONS]["upd"] == 3
    assert got["tables"][EXECUTIONS]["hot_ratio"] == pytest.approx(1 / 3, abs=0.001)
    assert got["rows"] == {"ins": 1, "upd": 3, "hot_upd": 1, "del": 0}
    assert got["rows_written"] == 4
    assert set(got["functions"]) == {"check_execution_change"}
    assert got["function_self_ms"] == pytest.approx(0.06)
    # Statements: the top-level ones are what clients sent; the costliest come first.
    assert got["statements"] == 2
    assert [s["query"] for s in got["top_statements"]] == ["INSERT ledger", "UPDATE claim"]
    assert got["top_statements"][0]["wal_bytes"] == 1_500


def test_without_pg_stat_statements_there_are_no_statement_figures() -> None:
    got = costs.per_dispatch(
        [_snapshot(scale=0, statements=False), _snapshot(scale=10, statements=False)], [], 10
    )
    assert got["statements"] is None
    assert got["top_statements"] is None


def test_sqlite_costs_come_from_the_replicas() -> None:
    replicas = [
        {
            "cpu_s": 1.0,
            "began": 0.0,
            "ended": 2.0,
            "bytes_written": 4096 * 700.0,
            "worker_cpu_s": 0.4,
            "worker_wall_s": 1.0,
            "worker_rows_changed": 500.0,
        },
        {
            "cpu_s": 1.0,
            "began": 0.0,
            "ended": 2.0,
            "bytes_written": 4096 * 300.0,
            "worker_cpu_s": 0.4,
            "worker_wall_s": 1.0,
            "worker_rows_changed": 500.0,
        },
    ]
    got = costs.per_dispatch([None, None], replicas, 100)
    assert got == {
        "rows_changed": 10,
        "bytes_written": 40_960,
        "pages_written": 10,
        "worker_cpu_ms": 8,
        "worker_wall_ms": 20,
        "worker_share_of_wall": 0.5,
        "worker_share_of_cpu": 0.4,
    }
