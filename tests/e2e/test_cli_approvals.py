"""The console script where self-approval is not allowed: `submit` is refused in one line
pointing at the single steps and writes nothing; `approval reject` cancels a request."""

from __future__ import annotations

import functools
import json
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import json_out, run_cli

NO_SELF_APPROVAL = {"QINGLONG_SELF_APPROVAL": "false"}
SUBMIT = ("submit", "run-create", "--project", "p1", "--task", "t1", "--revision", "1")
PLAN = {
    "schemaVersion": 1,
    "actionRef": "act-1",
    "projectId": "p1",
    "taskId": "t1",
    "taskRevision": 2,
    "executorType": "shell",
    "priority": 0,
}


def _one_line_refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def _points_at_the_steps(line: str) -> None:
    assert "approval create" in line
    assert "approval approve" in line


# -- edge: QINGLONG_SELF_APPROVAL=false ----------------------------------------------------


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    return tmp_path


def _edge_counts(workdir: Path) -> tuple[int, ...]:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("action_plans", "approval_requests", "security_audit_events")
        )
    finally:
        conn.close()


@pytest.mark.slow
def test_edge_submit_without_self_approval_is_one_line_and_writes_nothing(workdir: Path) -> None:
    line = _one_line_refusal(run_cli(*SUBMIT, cwd=workdir, env=NO_SELF_APPROVAL))
    assert "self-approval is not allowed" in line
    _points_at_the_steps(line)
    assert _edge_counts(workdir) == (0, 0, 0)
    # The single steps: the same OS user may create, not approve its own request.
    created = json_out(
        run_cli(
            "approval",
            "create",
            "--action",
            "run.create",
            "--plan",
            "plan.json",
            "--requested-by",
            "alice",
            "--json",
            cwd=workdir,
            env=NO_SELF_APPROVAL,
        )
    )
    approval_id = created["approval_request_id"]
    refused = run_cli(
        "approval", "approve", approval_id, "--by", "bob", cwd=workdir, env=NO_SELF_APPROVAL
    )
    assert "may not approve" in _one_line_refusal(refused)
    # Allowed again (the default), submit works.
    assert run_cli(*SUBMIT, cwd=workdir).returncode == 0


@pytest.mark.slow
def test_approval_reject_cancels_a_pending_request(workdir: Path) -> None:
    created = json_out(
        run_cli(
            "approval",
            "create",
            "--action",
            "run.create",
            "--plan",
            "plan.json",
            "--requested-by",
            "alice",
            "--json",
            cwd=workdir,
        )
    )
    approval_id = created["approval_request_id"]
    rejected = json_out(
        run_cli("approval", "reject", approval_id, "--by", "carol", "--json", cwd=workdir)
    )
    assert rejected == {"approval_request_id": approval_id, "status": "rejected"}
    again = run_cli("approval", "approve", approval_id, "--by", "bob", cwd=workdir)
    assert "rejected" in _one_line_refusal(again)
    bad = run_cli("approval", "reject", approval_id, "--by", "not valid!", cwd=workdir)
    assert bad.returncode == 2, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr
    unknown = run_cli("approval", "reject", "a-nope", "--by", "carol", cwd=workdir)
    assert "not found" in _one_line_refusal(unknown)


@pytest.mark.slow
def test_edge_submit_tool_invoke_without_self_approval_is_refused(workdir: Path) -> None:
    assert run_cli(*SUBMIT, cwd=workdir).returncode == 0
    assert run_cli("tick", "--once", cwd=workdir).returncode == 0
    (workdir / "var" / "tool-sandbox").mkdir()
    (workdir / "content.txt").write_text("hello\n")
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        ((run_id,),) = conn.execute("SELECT run_id FROM runs").fetchall()
    finally:
        conn.close()
    before = _edge_counts(workdir)
    result = run_cli(
        "submit",
        "tool-invoke",
        "--project",
        "p1",
        "--run",
        str(run_id),
        "--tool",
        "builtin.file.write",
        "--content-file",
        "content.txt",
        cwd=workdir,
        env=NO_SELF_APPROVAL,
    )
    _points_at_the_steps(_one_line_refusal(result))
    assert _edge_counts(workdir) == before


# -- cluster: the database decides by role -------------------------------------------------


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


def _cluster(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--profile", "cluster", "--database", url, cwd=cwd)


async def _cluster_counts(database: str) -> dict[str, int]:
    (row,) = await stores.raw(
        database,
        "SELECT (SELECT count(*) FROM qinglong.action_plans) AS plans, "
        "(SELECT count(*) FROM qinglong.approval_requests) AS approvals, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit",
    )
    return dict(row)


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_submit_is_refused_for_logins_that_may_not_self_approve(
    database: str, tmp_path: Path
) -> None:
    runtime, strict = stores.runtime_url(database), stores.strict_approver_url(database)
    for url, text in (
        (runtime, "not a member of the installation's _approver role"),
        (strict, "self-approval"),
    ):
        result = await anyio.to_thread.run_sync(
            functools.partial(_cluster, url, *SUBMIT, cwd=tmp_path)
        )
        line = _one_line_refusal(result)
        assert text in line
        _points_at_the_steps(line)
        assert stores.LOGIN_PASSWORD not in line  # never the password
    assert await _cluster_counts(database) == {"plans": 0, "approvals": 0, "audit": 0}

    # The steps, as the README shows them: runtime creates, an approver approves, runtime
    # consumes.
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))

    def steps() -> dict[str, str]:
        created = json_out(
            _cluster(
                runtime,
                "approval",
                "create",
                "--action",
                "run.create",
                "--plan",
                "plan.json",
                "--requested-by",
                "alice",
                "--json",
                cwd=tmp_path,
            )
        )
        approval_id = created["approval_request_id"]
        mine = _cluster(runtime, "approval", "approve", approval_id, "--by", "bob", cwd=tmp_path)
        assert "qinglong_approver" in _one_line_refusal(mine)
        approved = json_out(
            _cluster(
                strict, "approval", "approve", approval_id, "--by", "carol", "--json", cwd=tmp_path
            )
        )
        assert approved["status"] == "approved"
        return dict(
            json_out(_cluster(runtime, "approval", "consume", approval_id, "--json", cwd=tmp_path))
        )

    consumed = await anyio.to_thread.run_sync(steps)
    (row,) = await stores.raw(
        database,
        "SELECT requested_principal, decided_principal, consumed_principal "
        "FROM qinglong.approval_requests "
        f"WHERE approval_request_id = '{consumed['approval_request_id']}'",
    )
    assert tuple(row.values()) == (
        stores.RUNTIME_LOGIN,
        stores.STRICT_APPROVER_LOGIN,
        stores.RUNTIME_LOGIN,
    )
