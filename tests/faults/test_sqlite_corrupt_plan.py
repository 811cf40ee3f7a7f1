"""A plan row whose bytes were damaged on disk (no longer UTF-8 text), in a real SQLite file
driven by real `qinglong-dispatcher` processes: its dispatch is `blocked` with the named
reason `plan_corrupt` at once, never released `retry_wait store_error` claim after claim
(the read used to fail as a bare "SQLite error (OperationalError)"), and every reader of
plans names the same reason."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from qinglong_dispatcher import api
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.sqlite_files import execution_statuses


def _submit(cwd: Path, revision: int) -> dict[str, str]:
    made = run_cli(
        "submit", "run-create", "--project", "p", "--task", "t", "--revision", str(revision),
        "--json", cwd=cwd,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return dict(json_out(made))


def _corrupt_plan(database: Path, action_ref: str) -> None:
    """Flip one byte of the plan's JSON text in the file itself to 0xFF (never UTF-8)."""
    conn = sqlite3.connect(database)
    try:
        (plan,) = conn.execute(
            "SELECT plan_json FROM action_plans WHERE action_ref = ?", (action_ref,)
        ).fetchone()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
    finally:
        conn.close()
    data = bytearray(database.read_bytes())
    text = plan.encode()
    assert data.count(text) == 1
    data[data.index(text) + len(text) // 2] = 0xFF
    database.write_bytes(bytes(data))
    conn = sqlite3.connect(database)
    try:
        # The row is there, unchanged in length; only reading it as text fails.
        (size,) = conn.execute(
            "SELECT length(CAST(plan_json AS BLOB)) FROM action_plans WHERE action_ref = ?",
            (action_ref,),
        ).fetchone()
        assert size == len(text)
    finally:
        conn.close()


def _dispatches(cwd: Path) -> dict[str, tuple[str, str | None]]:
    listed = json_out(run_cli("dispatch", "list", "--json", cwd=cwd))
    return {d["dispatch_id"]: (d["status"], d["result_code"]) for d in listed["dispatches"]}


@pytest.mark.slow
def test_a_damaged_plan_row_is_blocked_by_name_and_the_rest_still_runs(tmp_path: Path) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    good = _submit(tmp_path, 1)
    bad = _submit(tmp_path, 2)
    database = tmp_path / "var" / "qinglong.db"
    _corrupt_plan(database, bad["action_ref"])

    drained = run_cli("tick", "--drain", cwd=tmp_path, env={"QINGLONG_LOG_FORMAT": "json"})
    assert drained.returncode == 0, drained.stderr
    assert "Traceback" not in drained.stderr
    assert "OperationalError" not in drained.stderr
    events = [json.loads(line) for line in drained.stderr.splitlines() if line.startswith("{")]
    released = [e for e in events if e["event"] == "dispatch.released"]
    assert [(e["dispatch_id"], e["outcome"], e["code"]) for e in released] == [
        (bad["dispatch_id"], "blocked", "plan_corrupt")
    ]
    assert _dispatches(tmp_path) == {
        good["dispatch_id"]: ("succeeded", "run_created"),
        bad["dispatch_id"]: ("blocked", "plan_corrupt"),
    }
    # Blocked is final: another drain claims nothing, and nothing waits to retry.
    again = run_cli("tick", "--drain", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert execution_statuses(database) == {"succeeded": 1, "blocked": 1}

    shown = run_cli("dispatch", "show", bad["dispatch_id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "(plan_corrupt)" in shown.stdout
    whole = run_cli("dispatch", "show", "--plan", bad["dispatch_id"], cwd=tmp_path)
    assert whole.returncode != 0
    (line,) = error_lines(whole.stderr)
    assert "plan_corrupt" in line
    checked = run_cli("keys", "check", cwd=tmp_path)
    assert checked.returncode == 1
    assert "1 plan_corrupt" in checked.stdout


def test_a_damaged_waiting_plan_is_listed_with_its_reason(tmp_path: Path) -> None:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    plan = tmp_path / "plan.json"
    whole = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 3})
    plan.write_text(json.dumps(whole.to_canonical_dict()), encoding="utf-8")
    made = run_cli(
        "approval", "create", "--action", "run.create", "--plan", str(plan),
        "--requested-by", "alice", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    _corrupt_plan(tmp_path / "var" / "qinglong.db", json_out(made)["action_ref"])
    listed = run_cli("approval", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (waiting,) = json_out(listed)["approvals"]
    assert waiting["plan"] is None
    assert "plan_corrupt" in json.dumps(waiting)
