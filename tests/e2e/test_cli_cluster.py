"""The real console script on the cluster profile against a fresh PostgreSQL database."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import SCRIPT, json_out, run_cli

pytestmark = pytest.mark.postgres

TASKS = 20


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database(migrated=False) as name:
        yield name


def _cluster(url: str, *args: str) -> list[str]:
    return [*args, "--profile", "cluster", "--database", url]


def _migrate(admin: str, runtime: str, cwd: Path) -> None:
    pending = run_cli(*_cluster(runtime, "migrate", "--check"), cwd=cwd)
    assert pending.returncode == 1, pending.stderr
    migrated = run_cli(*_cluster(admin, "migrate"), cwd=cwd)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied" in migrated.stdout
    again = run_cli(*_cluster(admin, "migrate"), cwd=cwd)
    assert (again.returncode, again.stdout.strip()) == (0, "schema is current")
    assert run_cli(*_cluster(runtime, "migrate", "--check"), cwd=cwd).returncode == 0


def _submit(runtime: str, cwd: Path) -> set[str]:
    def one(i: int) -> str:
        args = ("submit", "run-create", "--project", "p", "--task", f"t{i}", "--revision", "1")
        out = json_out(run_cli(*_cluster(runtime, *args, "--json"), cwd=cwd))
        return str(out["dispatch_id"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        return set(pool.map(one, range(TASKS)))


def _drain_from_two_processes(runtime: str, cwd: Path) -> list[Any]:
    """Two replicas drain at once; each is a process with its own pool and owner id."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    ticks = [
        subprocess.Popen(
            [str(SCRIPT), *_cluster(runtime, "tick", "--drain", "--json")],
            cwd=cwd,
            env={**clean, "QINGLONG_OWNER_ID": f"replica-{name}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    reports = []
    for tick in ticks:
        stdout, stderr = tick.communicate(timeout=60)
        reports.append(
            json_out(subprocess.CompletedProcess(tick.args, tick.returncode, stdout, stderr))
        )
    return reports


async def test_migrate_submit_two_concurrent_drains_and_status(database: str, tmp_path: Path):
    admin, runtime = stores.pg_url(database), stores.runtime_url(database)
    await anyio.to_thread.run_sync(_migrate, admin, runtime, tmp_path)
    ids = await anyio.to_thread.run_sync(_submit, runtime, tmp_path)
    assert len(ids) == TASKS

    reports = await anyio.to_thread.run_sync(_drain_from_two_processes, runtime, tmp_path)
    assert sum(r["outcomes"].get("succeeded", 0) for r in reports) == TASKS

    status = json_out(
        await anyio.to_thread.run_sync(
            lambda: run_cli(*_cluster(runtime, "status", "--json"), cwd=tmp_path)
        )
    )
    assert status["profile"] == "cluster"
    assert status["executions"]["succeeded"] == TASKS
    assert status["runs"] == TASKS
    assert status["due"] == 0
    starts = await stores.raw(
        database,
        "SELECT dispatch_id, count(*) AS n FROM qinglong.execution_events "
        "WHERE from_status = 'leased' AND to_status = 'executing' GROUP BY dispatch_id",
    )
    assert sorted(r["dispatch_id"] for r in starts) == sorted(ids)
    assert {r["n"] for r in starts} == {1}
