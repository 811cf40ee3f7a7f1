"""`approval approve ID …` and `--from-file`: many approvals in one call, all or nothing."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio.to_thread
import pytest

from qinglong_dispatcher import clock as clocks
from qinglong_dispatcher import ports
from tests.support import stores
from tests.support.actions import make_api
from tests.support.cli import json_out, run_cli

COUNT = 20


async def _create(store: ports.Store, count: int) -> list[str]:
    """`count` pending run.create requests made by alice."""
    the_api = make_api(store, clocks.SystemClock())
    created = []
    for i in range(count):
        plan = {
            "schemaVersion": 1,
            "actionRef": f"act-{i}",
            "projectId": "p1",
            "taskId": f"t{i}",
            "taskRevision": 1,
            "executorType": "shell",
            "priority": 0,
        }
        approval = await the_api.create_approval("run.create", plan, requested_by="alice")
        created.append(approval.approval_request_id)
    return created


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


Approve = Callable[..., subprocess.CompletedProcess[str]]
Statuses = Callable[[], Awaitable[dict[str, str]]]


async def _all_or_nothing(
    approve: Approve, statuses: Statuses, created: list[str], tmp_path: Path
) -> None:
    """One bad id writes nothing; then twenty approvals take one call, from a file."""
    rest, (already,) = created[:-1], created[-1:]
    one = json_out(await anyio.to_thread.run_sync(approve, already, "--json"))
    assert one == {"approval_request_id": already, "status": "approved"}

    listed = tmp_path / "ids.txt"
    listed.write_text(
        "# approved for the nightly builds\n\n"
        + "".join(f"{i}  # one\n" for i in rest[:10])
        + "a-does-not-exist\n"
        + "".join(f"{i}\n" for i in rest[10:]),
        encoding="utf-8",
    )
    line = _refusal(await anyio.to_thread.run_sync(approve, "--from-file", str(listed)))
    assert "a-does-not-exist" in line
    assert "not found" in line
    assert set((await statuses()).values()) == {"pending", "approved"}
    assert sum(s == "approved" for s in (await statuses()).values()) == 1
    # An id already decided is refused the same way, naming it.
    line = _refusal(await anyio.to_thread.run_sync(approve, *[*rest[:3], already]))
    assert already in line
    assert "approved, not pending" in line
    assert sum(s == "approved" for s in (await statuses()).values()) == 1

    listed.write_text("".join(f"{i}\n" for i in rest) + "# done\n", encoding="utf-8")
    done = json_out(await anyio.to_thread.run_sync(approve, "--from-file", str(listed), "--json"))
    assert done == {"approvals": [{"approval_request_id": i, "status": "approved"} for i in rest]}
    assert set((await statuses()).values()) == {"approved"}


@pytest.mark.slow
async def test_edge_bulk_approval_is_one_call_and_all_or_nothing(tmp_path: Path) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    path = tmp_path / "var" / "qinglong.db"
    store = await stores.open_sqlite(path)
    try:
        created = await _create(store, COUNT)
    finally:
        await store.close()

    def approve(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli("approval", "approve", *args, "--by", "bob", cwd=tmp_path)

    async def statuses() -> dict[str, str]:
        opened = await stores.open_sqlite(path)
        try:
            found = [await opened.get_approval(i) for i in created]
        finally:
            await opened.close()
        return {a.approval_request_id: a.status.value for a in found if a is not None}

    await _all_or_nothing(approve, statuses, created, tmp_path)
    usage = run_cli("approval", "approve", "--by", "bob", cwd=tmp_path)
    assert usage.returncode == 2, usage.stderr
    twice = run_cli("approval", "approve", created[0], created[0], "--by", "bob", cwd=tmp_path)
    assert twice.returncode == 2
    assert "listed twice" in twice.stderr


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_bulk_approval_by_a_separate_approver(database: str, tmp_path: Path) -> None:
    runtime = await stores.open_postgres(stores.runtime_url(database), max_size=1)
    try:
        created = await _create(runtime, COUNT + 2)
    finally:
        await runtime.close()
    created, spare = created[:COUNT], created[COUNT:]
    strict = stores.strict_approver_url(database)

    def approve(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "approval",
            "approve",
            *args,
            "--by",
            "carol",
            "--profile",
            "cluster",
            "--database",
            strict,
            cwd=tmp_path,
        )

    async def statuses() -> dict[str, str]:
        rows = await stores.raw(
            database, "SELECT approval_request_id, status FROM qinglong.approval_requests"
        )
        return {
            r["approval_request_id"]: r["status"]
            for r in rows
            if r["approval_request_id"] in created
        }

    await _all_or_nothing(approve, statuses, created, tmp_path)
    (row,) = await stores.raw(
        database,
        "SELECT count(DISTINCT decided_principal) AS n, min(decided_principal) AS who "
        "FROM qinglong.approval_requests WHERE status = 'approved'",
    )
    assert (row["n"], row["who"]) == (1, stores.STRICT_APPROVER_LOGIN)
    # The runtime login may not approve: refused whole, naming the first request.
    mine = await anyio.to_thread.run_sync(
        functools.partial(
            run_cli,
            "approval",
            "approve",
            *spare,
            "--by",
            "bob",
            "--profile",
            "cluster",
            "--database",
            stores.runtime_url(database),
            cwd=tmp_path,
        )
    )
    line = _refusal(mine)
    assert spare[0] in line
    assert "qinglong_approver" in line
