"""`dispatch resubmit ID` through the real console script: a cancelled dispatch and an expired
request are requested again as new pending requests for the same plan (edge), a dispatch that
succeeded is refused with one line, and on a cluster the login decides (an approver's
re-submits; a submitter's, which may not read plans, writes nothing: it re-submits through the
API or the UI, where the daemon reads the plan)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from qinglong_dispatcher import api
from tests.support import stores
from tests.support.cli import json_out, run_cli


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    result = run_cli("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def _rows(workdir: Path, sql: str) -> list[Any]:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _submit(cli_dir: Path, task: str) -> dict[str, Any]:
    args = ("submit", "run-create", "--project", "p1", "--task", task, "--revision", "1")
    out: dict[str, Any] = json_out(run_cli(*args, "--json", cwd=cli_dir))
    return out


def _without_ref(plan_json: str) -> dict[str, Any]:
    plan: dict[str, Any] = json.loads(plan_json)
    plan.pop("actionRef")
    return plan


@pytest.mark.slow
def test_a_cancelled_dispatch_and_an_expired_request_are_requested_again(workdir: Path) -> None:
    cancelled, done = _submit(workdir, "t1"), _submit(workdir, "t2")
    out = run_cli("dispatch", "cancel", cancelled["dispatch_id"], "--reason", "x", cwd=workdir)
    assert out.returncode == 0, out.stderr
    assert json_out(run_cli("tick", "--drain", "--json", cwd=workdir))["outcomes"] == {
        "succeeded": 1
    }

    again = json_out(
        run_cli("dispatch", "resubmit", cancelled["dispatch_id"], "--json", cwd=workdir)
    )
    assert again["status"] == "pending"
    assert again["resubmitted_from"] == cancelled["dispatch_id"]
    assert again["action_ref"] != cancelled["action_ref"]
    plans = dict(_rows(workdir, "SELECT action_ref, plan_json FROM action_plans"))
    assert _without_ref(plans[again["action_ref"]]) == _without_ref(plans[cancelled["action_ref"]])
    listed = json_out(run_cli("approval", "list", "--json", cwd=workdir))
    assert [a["approval_request_id"] for a in listed["approvals"]] == [again["approval_request_id"]]
    # Nothing ran: no new dispatch until someone approves it.
    assert json_out(run_cli("tick", "--drain", "--json", cwd=workdir))["outcomes"] == {}
    # Each end names the other: the request what it came from, the dispatch what it became.
    shown = json_out(
        run_cli("approval", "show", again["approval_request_id"], "--json", cwd=workdir)
    )
    assert (shown["resubmitted_from"], shown["requested_again"]) == (cancelled["dispatch_id"], [])
    origin = run_cli("dispatch", "show", cancelled["dispatch_id"], cwd=workdir)
    assert f"again as     {again['approval_request_id']}" in origin.stdout
    text = run_cli("approval", "show", again["approval_request_id"], cwd=workdir)
    assert f"again from {cancelled['dispatch_id']}" in text.stdout

    before = _rows(workdir, "SELECT count(*) FROM approval_requests")
    line = _one_line(run_cli("dispatch", "resubmit", done["dispatch_id"], cwd=workdir), 1)
    assert f"dispatch {done['dispatch_id']} is succeeded" in line
    _one_line(run_cli("dispatch", "resubmit", "d-0000nothere", cwd=workdir), 1)
    _one_line(run_cli("dispatch", "resubmit", "not an id;", cwd=workdir), 1)
    line = _one_line(run_cli("dispatch", "resubmit", again["approval_request_id"], cwd=workdir), 1)
    assert "is pending: only an expired request" in line
    assert _rows(workdir, "SELECT count(*) FROM approval_requests") == before

    # An expired request, by its id.
    plan = api.run_create_plan({"projectId": "p1", "taskId": "t3", "taskRevision": 1})
    (workdir / "plan.json").write_text(json.dumps(plan.to_canonical_dict()))
    quick = {"QINGLONG_APPROVAL_TTL_SECONDS": "0.2"}
    created = run_cli(
        "approval", "create", "--action", "run.create", "--plan", "plan.json",
        "--requested-by", "w", "--json", cwd=workdir, env=quick,
    )  # fmt: skip
    request_id = json_out(created)["approval_request_id"]
    time.sleep(0.4)
    assert run_cli("tick", "--once", cwd=workdir).returncode == 0
    status = _rows(
        workdir, f"SELECT status FROM approval_requests WHERE approval_request_id = '{request_id}'"
    )
    assert status == [("expired",)]
    renewed = json_out(run_cli("dispatch", "resubmit", request_id, "--json", cwd=workdir))
    assert (renewed["status"], renewed["resubmitted_from"]) == ("pending", request_id)
    expired = json_out(run_cli("approval", "show", request_id, "--json", cwd=workdir))
    assert expired["requested_again"] == [renewed["approval_request_id"]]


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_resubmit_is_the_logins_to_make(tmp_path: Path) -> None:
    submitter = stores.session_login("resubmitter")
    await stores.create_login(submitter, "qinglong_submitter")
    async with stores.fresh_database() as database:

        def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args, "--profile", "cluster", "--database", url, cwd=tmp_path)

        def scenario() -> None:
            args = ("submit", "run-create", "--project", "p", "--task", "t", "--revision", "1")
            approver = stores.approver_url(database)
            plain = stores.pg_url(database, login=submitter)
            out = json_out(cli(approver, *args, "--json"))
            dispatch_id = out["dispatch_id"]
            operator = stores.operator_url(database)
            done = cli(operator, "dispatch", "cancel", dispatch_id, "--reason", "x")
            assert done.returncode == 0, done.stderr
            count = ("approval", "list", "--status", "pending", "--json")
            assert json_out(cli(approver, *count))["approvals"] == []
            line = _one_line(cli(plain, "dispatch", "resubmit", dispatch_id), 1)
            assert "nothing was written" in line
            assert json_out(cli(approver, *count))["approvals"] == []
            again = json_out(cli(approver, "dispatch", "resubmit", dispatch_id, "--json"))
            (pending,) = json_out(cli(approver, *count))["approvals"]
            assert pending["approval_request_id"] == again["approval_request_id"]
            assert pending["requested_principal"] == stores.APPROVER_LOGIN
            assert pending["plan"]["taskId"] == "t"

        await anyio.to_thread.run_sync(scenario)
