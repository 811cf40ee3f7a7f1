"""SIGKILL between the start barrier and the completion: recovery settles by the file, once."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import json_out, run_cli

REPO = Path(__file__).resolve().parents[2]


class Target:
    """One dialect's database as the CLI (in a worker thread) and a raw reader see it."""

    def __init__(self, dialect: str, cwd: Path, args: list[str], env: dict[str, str]) -> None:
        self.dialect, self.cwd, self.args, self.env = dialect, cwd, args, env
        self.query: Callable[[str], Any] = lambda sql: None
        self.approver_env: dict[str, str] = {}
        """What `submit` (a self-approval) runs with instead: an approver login on PostgreSQL."""

    def table(self, name: str) -> str:
        return name if self.dialect == "sqlite" else f"qinglong.{name}"

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(
            lambda: run_cli(*args, *self.args, cwd=self.cwd, env=self.env)
        )

    async def submit(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **self.approver_env}
        return await anyio.to_thread.run_sync(
            lambda: run_cli("submit", *args, *self.args, cwd=self.cwd, env=env)
        )

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        result: list[tuple[Any, ...]] = await self.query(sql)
        return result


@contextlib.asynccontextmanager
async def _target(dialect: str, tmp_path: Path) -> AsyncIterator[Target]:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    env = {"QINGLONG_TOOL_SANDBOX_DIR": str(sandbox), "QINGLONG_LEASE_SECONDS": "1"}
    if dialect == "sqlite":
        db = tmp_path / "var" / "qinglong.db"
        target = Target(dialect, tmp_path, [], {**env})

        async def query(sql: str) -> list[tuple[Any, ...]]:
            def read() -> list[tuple[Any, ...]]:
                conn = sqlite3.connect(db)
                try:
                    return conn.execute(sql).fetchall()
                finally:
                    conn.close()

            return await anyio.to_thread.run_sync(read)

        target.query = query
        assert (await target.cli("migrate")).returncode == 0
        target.env["QINGLONG_DATABASE_URL"] = f"sqlite:///{db}"
        yield target
        return
    async with stores.fresh_database() as name:
        url = stores.runtime_url(name)
        target = Target(
            dialect,
            tmp_path,
            [],
            {**env, "QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": url},
        )

        async def pg_query(sql: str) -> list[tuple[Any, ...]]:
            return [tuple(r.values()) for r in await stores.raw(name, sql)]

        target.query = pg_query
        target.approver_env = {"QINGLONG_DATABASE_URL": stores.approver_url(name)}
        yield target


@pytest.mark.slow
@pytest.mark.parametrize(
    "dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_sigkill_after_the_file_then_recovery_settles_by_evidence_once(
    tmp_path: Path, dialect: str
) -> None:
    async with _target(dialect, tmp_path) as target:
        made = await target.submit(
            "run-create", "--project", "p1", "--task", "t", "--revision", "1"
        )
        assert made.returncode == 0, made.stderr
        assert (await target.cli("tick", "--once")).returncode == 0
        ((run_id,),) = await target.rows(f"SELECT run_id FROM {target.table('runs')}")
        content = tmp_path / "content.txt"
        content.write_text("written exactly once\n")
        out = json_out(
            await target.submit(
                "tool-invoke",
                "--project",
                "p1",
                "--run",
                run_id,
                "--tool",
                "builtin.file.write",
                "--content-file",
                str(content),
                "--json",
            )
        )
        clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
        victim = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-m", "tests.support.tool_crash"],
                cwd=REPO,
                env={**clean, **target.env},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        )
        assert victim.returncode == -signal.SIGKILL, victim.stderr
        dispatch_id, step_run_id = out["dispatch_id"], out["step_run_id"]
        written = tmp_path / "sandbox" / "p1" / dispatch_id
        before = written.stat()
        assert written.read_text() == "written exactly once\n"
        barriers = target.table("tool_execution_start_barriers")
        assert await target.rows(f"SELECT count(*) FROM {barriers}") == [(1,)]
        step_sql = (
            f"SELECT status FROM {target.table('step_runs')} WHERE step_run_id = '{step_run_id}'"
        )
        assert await target.rows(step_sql) == [("running",)]
        await anyio.sleep(1.2)  # the dead process's lease expires: recovery_required
        report = json_out(await target.cli("tick", "--once", "--json"))
        assert report["reconcile"]["outcomes"] == {"resolved_succeeded": 1}
        executions = target.table("approved_action_dispatch_executions")
        assert await target.rows(
            f"SELECT status FROM {executions} WHERE dispatch_id = '{dispatch_id}'"
        ) == [("succeeded",)]
        assert await target.rows(step_sql) == [("succeeded",)]
        after = written.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert sorted(p.name for p in written.parent.iterdir()) == [dispatch_id]
        status = json_out(await target.cli("status", "--json"))
        assert status["step_runs"]["succeeded"] == 1
