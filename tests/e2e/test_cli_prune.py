"""`prune` through the real console script: edge, cluster (as the pruner login), bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher.domain import states
from tests.support import stores
from tests.support.actions import submit_runs, submit_runs_as_approver
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.clock import START_MS, ManualClock
from tests.support.dispatching import make_dispatcher


async def _finished_in_2023(path: Path, clock: ManualClock, count: int) -> None:
    """`count` run.create dispatches that succeeded at the manual clock's 2023 instant, and one
    still pending (never pruned)."""
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
        await submit_runs(store, clock, count)
        report = await make_dispatcher(store, clock, page_size=64).dispatch_batch()
        assert report.outcomes["succeeded"] == count
        await submit_runs(store, clock, 1, project="waiting")
    finally:
        await store.close()


@pytest.mark.slow
async def test_prune_on_edge_counts_then_prunes_and_keeps_what_is_not_finished(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "edge.db"
    await _finished_in_2023(path, clock, 3)
    url = ("--database", f"sqlite:///{path}")

    dry = json_out(
        run_cli("prune", "--older-than", "30d", "--dry-run", "--json", *url, cwd=tmp_path)
    )
    assert dry == {
        "dry_run": True,
        "dispatches": 3,
        "audit_events": 0,
        "notification_events": 0,
        "batches": 0,
        "pages_freed": 0,
    }
    done = run_cli("prune", "--older-than", "30d", *url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "pruned 3 dispatch trees, 0 audit records and 0 notification events in 1 batches"
    )
    again = json_out(run_cli("prune", "--older-than", "30d", "--json", *url, cwd=tmp_path))
    assert again == {
        "dry_run": False,
        "dispatches": 0,
        "audit_events": 0,
        "notification_events": 0,
        "batches": 1,
        "pages_freed": 0,
    }

    status = json_out(run_cli("status", "--json", *url, cwd=tmp_path))
    assert status["executions"]["pending"] == 1
    assert status["executions"]["succeeded"] == 0
    assert status["runs"] == 3  # Runs are business data: kept


@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "0d"],
        ["--older-than", "-1d"],
        ["--older-than", "7"],
        ["--older-than", "7x"],
        ["--older-than", "1d", "--audit-older-than", "0m"],
        [],
    ],
)
def test_bad_prune_arguments_are_one_line_exit_2_and_touch_nothing(
    tmp_path: Path, args: list[str]
) -> None:
    path = tmp_path / "absent.db"
    result = run_cli("prune", *args, "--database", f"sqlite:///{path}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = error_lines(result.stderr)
    assert line.startswith("qinglong-dispatcher: error:")
    assert "Traceback" not in result.stderr
    assert not path.exists()


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


@pytest.mark.postgres
async def test_prune_on_the_cluster_runs_as_the_pruner_and_the_runtime_is_refused(
    tmp_path: Path, database: str, clock: ManualClock
) -> None:
    await submit_runs_as_approver(database, clock, 2)
    runtime = await stores.open_postgres(stores.runtime_url(database), max_size=2)
    try:
        assert (await make_dispatcher(runtime, clock).dispatch_batch()).outcomes["succeeded"] == 2
    finally:
        await runtime.close()

    def prune(url: str) -> list[str]:
        return ["prune", "--older-than", "1d", "--json", "--profile", "cluster", "--database", url]

    refused = run_cli(*prune(stores.runtime_url(database)), cwd=tmp_path)
    assert refused.returncode == 1, refused.stderr
    (line,) = error_lines(refused.stderr)
    assert "permission denied" in line
    out = json_out(run_cli(*prune(stores.pruner_url(database)), cwd=tmp_path))
    assert out == {
        "dry_run": False,
        "dispatches": 2,
        "audit_events": 0,
        "notification_events": 0,
        "batches": 1,
        "pages_freed": 0,
    }
    rows = await stores.raw(
        database, "SELECT count(*) AS n FROM qinglong.approved_action_dispatch_executions"
    )
    assert rows[0]["n"] == 0
    assert states.ExecutionStatus.SUCCEEDED in states.TERMINAL
