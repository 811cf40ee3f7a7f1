"""`dispatch list` and `dispatch show` through the real console script (edge, and a cluster run)."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import json_out, run_cli


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    result = run_cli("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def query(workdir: Path, sql: str) -> list[Any]:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def snapshot(workdir: Path) -> list[Any]:
    """Row counts of the tables a write would touch, and the execution rows themselves."""
    counts = [
        query(workdir, f"SELECT count(*) FROM {table}")[0][0]
        for table in (
            "approval_requests",
            "approved_action_dispatches",
            "execution_events",
            "runs",
            "security_audit_events",
            "recovery_observations",
        )
    ]
    return [counts, query(workdir, "SELECT * FROM approved_action_dispatch_executions")]


def submit(workdir: Path, task: str) -> dict[str, Any]:
    args = ("submit", "run-create", "--project", "p1", "--task", task, "--revision", "1")
    out: dict[str, Any] = json_out(run_cli(*args, "--json", cwd=workdir))
    return out


@pytest.mark.slow
def test_list_pages_then_show_the_first(workdir: Path) -> None:
    submitted = [submit(workdir, f"t{i}") for i in range(3)]
    for out in submitted:
        assert set(out) == {"dispatch_id", "approval_request_id", "action_ref", "run_id"}
        assert out["run_id"] is None  # nothing has run yet
    assert json_out(run_cli("tick", "--drain", "--json", cwd=workdir))["outcomes"] == {
        "succeeded": 3
    }
    before = snapshot(workdir)

    listed = json_out(run_cli("dispatch", "list", "--json", cwd=workdir))
    assert set(listed) == {"dispatches", "next"}
    assert listed["next"] is None
    newest_first = [out["dispatch_id"] for out in reversed(submitted)]
    assert [row["dispatch_id"] for row in listed["dispatches"]] == newest_first
    first = listed["dispatches"][0]
    assert set(first) == {
        "dispatch_id",
        "project_id",
        "action_type",
        "action_ref",
        "status",
        "attempt",
        "max_attempts",
        "created_at_ms",
        "updated_at_ms",
        "result_code",
        "target",
        "waiting_for_target",
        "wait",
    }
    assert (first["target"], first["waiting_for_target"], first["wait"]) == (None, None, None)
    assert (first["status"], first["action_type"], first["result_code"]) == (
        "succeeded",
        "run.create",
        "run_created",
    )

    page = json_out(run_cli("dispatch", "list", "--limit", "2", "--json", cwd=workdir))
    assert [row["dispatch_id"] for row in page["dispatches"]] == newest_first[:2]
    assert page["next"] == f"{page['dispatches'][1]['created_at_ms']}:{newest_first[1]}"
    rest = json_out(
        run_cli("dispatch", "list", "--limit", "2", "--after", page["next"], "--json", cwd=workdir)
    )
    assert ([row["dispatch_id"] for row in rest["dispatches"]], rest["next"]) == (
        newest_first[2:],
        None,
    )
    filtered = json_out(
        run_cli("dispatch", "list", "--status", "pending", "--project", "p1", "--json", cwd=workdir)
    )
    assert filtered == {"dispatches": [], "next": None}

    shown = json_out(run_cli("dispatch", "show", first["dispatch_id"], "--json", cwd=workdir))
    (run_id,) = query(
        workdir, f"SELECT run_id FROM runs WHERE idempotency_key = '{first['dispatch_id']}'"
    )[0]
    assert shown["dispatch_id"] == first["dispatch_id"]
    assert shown["run_id"] == run_id == shown["receipt"]["resource_id"]
    assert shown["plan"]["taskId"] == "t2"
    assert shown["execution"]["effective_status"] == "succeeded"
    # A passage: claim, start, effect and completion in one transaction, one line.
    assert [(e["from_status"], e["to_status"]) for e in shown["events"]] == [
        (None, "pending"),
        ("pending", "succeeded"),
    ]
    assert all(isinstance(e["committed_at_ms"], int) for e in shown["events"])

    text = run_cli("dispatch", "show", first["dispatch_id"], cwd=workdir)
    assert text.returncode == 0, text.stderr
    assert f"run          {run_id}" in text.stdout
    table = run_cli("dispatch", "list", "--limit", "1", cwd=workdir)
    assert table.returncode == 0, table.stderr
    assert first["dispatch_id"] in table.stdout
    assert f"more: --after {first['created_at_ms']}:{first['dispatch_id']}" in table.stdout

    (token,) = query(
        workdir,
        "SELECT lease_token FROM approved_action_dispatch_executions "
        f"WHERE dispatch_id = '{first['dispatch_id']}'",
    )[0]
    for output in (text.stdout, table.stdout, str(shown), str(listed)):
        assert token not in output
    assert snapshot(workdir) == before  # read only


@pytest.mark.slow
def test_recovery_required_is_listed_and_shown(workdir: Path) -> None:
    dispatch_id = submit(workdir, "t1")["dispatch_id"]
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    # A dispatcher that died after the barrier (the state machine allows it in two steps).
    with conn:
        conn.execute(
            "UPDATE approved_action_dispatch_executions SET status = 'leased', version = 1, "
            "attempt = 1, lease_owner = 'dead:1', lease_token = 'tok-secret', "
            "lease_expires_at_ms = 1, eligible_at_ms = 1 WHERE dispatch_id = ?",
            (dispatch_id,),
        )
        conn.execute(
            "UPDATE approved_action_dispatch_executions SET status = 'executing', version = 2, "
            "started_at_ms = 1, eligible_at_ms = NULL WHERE dispatch_id = ?",
            (dispatch_id,),
        )
    conn.close()
    listed = json_out(
        run_cli("dispatch", "list", "--status", "recovery_required", "--json", cwd=workdir)
    )
    assert [(r["dispatch_id"], r["status"]) for r in listed["dispatches"]] == [
        (dispatch_id, "recovery_required")
    ]
    executing = json_out(
        run_cli("dispatch", "list", "--status", "executing", "--json", cwd=workdir)
    )
    assert executing["dispatches"] == []
    shown = run_cli("dispatch", "show", dispatch_id, "--json", cwd=workdir)
    assert json_out(shown)["execution"]["effective_status"] == "recovery_required"
    assert json_out(shown)["execution"]["lease_owner"] == "dead:1"
    assert "tok-secret" not in shown.stdout
    text = run_cli("dispatch", "show", dispatch_id, cwd=workdir)
    assert "recovery_required (stored executing, lease expired)" in text.stdout
    assert "tok-secret" not in text.stdout


@pytest.mark.slow
def test_show_counts_a_takeover_against_its_bound(workdir: Path) -> None:
    taken, fresh = (submit(workdir, task)["dispatch_id"] for task in ("t1", "t2"))
    # A dispatcher that died holding the claim before the barrier; the tick takes it over.
    with sqlite3.connect(workdir / "var" / "qinglong.db") as conn:
        conn.execute(
            "UPDATE approved_action_dispatch_executions SET status = 'leased', version = 1, "
            "attempt = 1, lease_owner = 'dead:1', lease_token = 'tok-dead', "
            "lease_expires_at_ms = 1, eligible_at_ms = 1 WHERE dispatch_id = ?",
            (taken,),
        )
    conn.close()
    drained = json_out(run_cli("tick", "--drain", "--json", cwd=workdir))
    assert drained["outcomes"] == {"succeeded": 2}
    shown: dict[str, tuple[Any, Any, list[str]]] = {}
    for dispatch_id in (taken, fresh):
        execution = json_out(run_cli("dispatch", "show", dispatch_id, "--json", cwd=workdir))[
            "execution"
        ]
        text = run_cli("dispatch", "show", dispatch_id, cwd=workdir).stdout
        (line,) = [line for line in text.splitlines() if line.startswith("takeovers ")]
        shown[dispatch_id] = (execution["takeovers"], execution["max_takeovers"], line.split())
    assert shown == {
        taken: (1, 20, ["takeovers", "1/20"]),
        fresh: (0, 20, ["takeovers", "0/20"]),
    }


BAD_INPUT = [
    (["dispatch", "show", "d-0000nothere"], 1),
    (["dispatch", "show", "not an id;"], 1),
    (["dispatch", "show"], 2),
    (["dispatch", "list", "--status", "bogus"], 2),
    (["dispatch", "list", "--limit", "0"], 2),
    (["dispatch", "list", "--limit", "501"], 2),
    (["dispatch", "list", "--limit", "many"], 2),
    (["dispatch", "list", "--after", "yesterday"], 2),
    (["dispatch", "list", "--project", "../x"], 2),
    (["dispatch", "list", "--action", "rm.rf"], 2),
    (["dispatch"], 2),
]
"""Unknown or malformed ids are refusals (1); bad options are usage errors (2)."""


@pytest.mark.slow
def test_bad_input_and_unknown_ids_are_one_line_and_write_nothing(workdir: Path) -> None:
    submit(workdir, "t1")
    before = snapshot(workdir)
    for args, code in BAD_INPUT:  # one store for all: each case is a process of its own
        result = run_cli(*args, cwd=workdir)
        assert_one_line_error(result, code)
        assert snapshot(workdir) == before, args
    not_found = run_cli("dispatch", "show", "d-0000nothere", cwd=workdir)
    assert "dispatch d-0000nothere not found" in not_found.stderr
    malformed = run_cli("dispatch", "show", "not an id;", cwd=workdir)
    assert "not a dispatch id" in malformed.stderr
    assert ";" not in malformed.stderr  # a malformed id is not echoed


@pytest.mark.parametrize("args", [["dispatch", "list"], ["dispatch", "show", "d-1"]])
def test_reading_never_creates_a_file_or_folder(tmp_path: Path, args: list[str]) -> None:
    result = run_cli("--database", "sqlite:///typo/qinglong.db", *args, cwd=tmp_path)
    assert_one_line_error(result, 69)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_list_as_runtime_and_show_as_operator(tmp_path: Path) -> None:
    async with stores.fresh_database() as database:

        def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args, "--profile", "cluster", "--database", url, cwd=tmp_path)

        def scenario() -> None:
            approver = stores.approver_url(database)
            args = ("submit", "run-create", "--project", "p", "--task", "t", "--revision", "1")
            out = json_out(cli(approver, *args, "--json"))
            assert out["run_id"] is None
            runtime, operator = stores.runtime_url(database), stores.operator_url(database)
            assert json_out(cli(runtime, "tick", "--drain", "--json"))["outcomes"] == {
                "succeeded": 1
            }
            listed = json_out(cli(runtime, "dispatch", "list", "--json"))
            assert [r["dispatch_id"] for r in listed["dispatches"]] == [out["dispatch_id"]]
            shown = json_out(cli(operator, "dispatch", "show", out["dispatch_id"], "--json"))
            assert shown["run_id"] == shown["receipt"]["resource_id"]
            assert len(shown["events"]) == 2  # pending, then its passage
            missing = cli(operator, "dispatch", "show", "d-nothere")
            assert_one_line_error(missing, 1)

        await anyio.to_thread.run_sync(scenario)


@pytest.mark.slow
def test_cancel_a_pending_dispatch_then_refuse_it_again(workdir: Path) -> None:
    first, second = submit(workdir, "t1"), submit(workdir, "t2")
    cancelled = json_out(
        run_cli(
            "dispatch",
            "cancel",
            first["dispatch_id"],
            "--reason",
            "wrong_task",
            "--json",
            cwd=workdir,
        )
    )
    assert cancelled["status"] == "cancelled"
    assert cancelled["reason"] == "wrong_task"
    # Only the other one runs; the cancelled one is listed, shown with its audit line.
    assert json_out(run_cli("tick", "--drain", "--json", cwd=workdir))["outcomes"] == {
        "succeeded": 1
    }
    listed = json_out(run_cli("dispatch", "list", "--status", "cancelled", "--json", cwd=workdir))
    assert [r["dispatch_id"] for r in listed["dispatches"]] == [first["dispatch_id"]]
    shown = run_cli("dispatch", "show", first["dispatch_id"], cwd=workdir).stdout
    assert "dispatch.cancelled pending:wrong_task" in shown
    assert "pending → cancelled" in shown
    status = json_out(run_cli("status", "--json", cwd=workdir))
    assert status["executions"]["cancelled"] == 1

    before = snapshot(workdir)
    for dispatch_id, state in (
        (first["dispatch_id"], "cancelled"),
        (second["dispatch_id"], "succeeded"),
    ):
        again = run_cli("dispatch", "cancel", dispatch_id, "--reason", "again", cwd=workdir)
        assert_one_line_error(again, 1)
        assert f"is {state}: only pending or retry_wait can be cancelled" in again.stderr
    for args, code in (
        (("dispatch", "cancel", second["dispatch_id"]), 2),  # --reason is required
        (("dispatch", "cancel", second["dispatch_id"], "--reason", "free text"), 2),
        (("dispatch", "cancel", "d-0000nothere", "--reason", "x"), 1),
        (("dispatch", "cancel", "not an id;", "--reason", "x"), 1),
    ):
        assert_one_line_error(run_cli(*args, cwd=workdir), code)
    assert snapshot(workdir) == before


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_cancel_needs_an_operator_login(tmp_path: Path) -> None:
    async with stores.fresh_database() as database:

        def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
            return run_cli(*args, "--profile", "cluster", "--database", url, cwd=tmp_path)

        def scenario() -> None:
            args = ("submit", "run-create", "--project", "p", "--task", "t", "--revision", "1")
            out = json_out(cli(stores.approver_url(database), *args, "--json"))
            runtime, operator = stores.runtime_url(database), stores.operator_url(database)
            refused = cli(runtime, "dispatch", "cancel", out["dispatch_id"], "--reason", "x")
            assert_one_line_error(refused, 1)
            assert "needs an operator login" in refused.stderr
            done = cli(operator, "dispatch", "cancel", out["dispatch_id"], "--reason", "x")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == f"{out['dispatch_id']} cancelled"
            shown = json_out(cli(operator, "dispatch", "show", out["dispatch_id"], "--json"))
            (audit,) = shown["audit"]
            assert audit["principal"] == stores.OPERATOR_LOGIN
            assert json_out(cli(runtime, "tick", "--drain", "--json"))["outcomes"] == {}

        await anyio.to_thread.run_sync(scenario)
