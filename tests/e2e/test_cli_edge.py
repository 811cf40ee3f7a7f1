"""The real console script on the edge profile, in a temporary directory."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import json_out, run_cli


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    result = run_cli("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "var" / "qinglong.db").exists()
    return tmp_path


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr


def count(workdir: Path, sql: str) -> int:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


@pytest.mark.slow
def test_submit_twenty_drain_and_status(workdir: Path) -> None:
    ids = set()
    for i in range(20):
        out = json_out(
            run_cli(
                "submit",
                "run-create",
                "--project",
                "p1",
                "--task",
                f"t{i}",
                "--revision",
                "3",
                "--json",
                cwd=workdir,
            )
        )
        assert set(out) == {"dispatch_id", "approval_request_id", "action_ref", "run_id"}
        ids.add(out["dispatch_id"])
    assert len(ids) == 20
    report = json_out(run_cli("tick", "--drain", "--json", cwd=workdir))
    assert report["outcomes"]["succeeded"] == 20
    status = json_out(run_cli("status", "--json", cwd=workdir))
    assert status["profile"] == "edge"
    assert status["executions"]["succeeded"] == 20
    assert status["runs"] == 20
    assert status["due"] == 0
    assert set(status["executions"]) == {
        "pending",
        "leased",
        "retry_wait",
        "executing",
        "recovery_required",
        "succeeded",
        "failed",
        "blocked",
        "cancelled",
    }
    assert json_out(run_cli("health", "--json", cwd=workdir)) == {"ok": True, "reason": "ok"}


@pytest.mark.slow
def test_bulk_submit_validates_every_line_before_writing(workdir: Path) -> None:
    good = {"projectId": "p1", "taskId": "t1", "taskRevision": 1}
    path = workdir / "plans.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "taskRevision": -1}) + "\n")
    result = run_cli("submit", "run-create", "--from-jsonl", str(path), cwd=workdir)
    assert_one_line_error(result, 2)
    assert ":2:" in result.stderr
    assert count(workdir, "SELECT count(*) FROM approval_requests") == 0
    path.write_text("\n".join(json.dumps({**good, "taskId": f"t{i}"}) for i in range(5)))
    rows = json_out(
        run_cli("submit", "run-create", "--from-jsonl", str(path), "--json", cwd=workdir)
    )
    assert len(rows) == 5
    assert count(workdir, "SELECT count(*) FROM approved_action_dispatch_executions") == 5


@pytest.mark.slow
def test_approval_steps_and_their_errors(workdir: Path) -> None:
    plan = {
        "schemaVersion": 1,
        "actionRef": "act-1",
        "projectId": "p1",
        "taskId": "t1",
        "taskRevision": 2,
        "executorType": "shell",
        "priority": 0,
    }
    plan_file = workdir / "plan.json"
    plan_file.write_text(json.dumps({**plan, "extra": True}))
    bad = run_cli(
        "approval",
        "create",
        "--action",
        "run.create",
        "--plan",
        str(plan_file),
        "--requested-by",
        "alice",
        cwd=workdir,
    )
    assert_one_line_error(bad, 2)
    assert "extra" in bad.stderr
    assert count(workdir, "SELECT count(*) FROM action_plans") == 0

    plan_file.write_text(json.dumps(plan))
    created = json_out(
        run_cli(
            "approval",
            "create",
            "--action",
            "run.create",
            "--plan",
            str(plan_file),
            "--requested-by",
            "alice",
            "--json",
            cwd=workdir,
        )
    )
    approval_id = created["approval_request_id"]
    unapproved = run_cli("approval", "consume", approval_id, cwd=workdir)
    assert_one_line_error(unapproved, 1)
    assert run_cli("approval", "approve", approval_id, "--by", "bob", cwd=workdir).returncode == 0
    consumed = json_out(run_cli("approval", "consume", approval_id, "--json", cwd=workdir))
    assert consumed["approval_request_id"] == approval_id
    twice = run_cli("approval", "consume", approval_id, cwd=workdir)
    assert_one_line_error(twice, 1)
    assert "consumed" in twice.stderr
    unknown = run_cli("approval", "consume", "a-nope", cwd=workdir)
    assert_one_line_error(unknown, 1)
    assert count(workdir, "SELECT count(*) FROM approved_action_dispatches") == 1


def _create_short_lived(workdir: Path, action_ref: str, ttl_seconds: str) -> str:
    """A run.create request for `action_ref` that lives `ttl_seconds`; its id."""
    plan = {
        "schemaVersion": 1,
        "actionRef": action_ref,
        "projectId": "p1",
        "taskId": "t1",
        "taskRevision": 2,
        "executorType": "shell",
        "priority": 0,
    }
    plan_file = workdir / "plan.json"
    plan_file.write_text(json.dumps(plan))
    created = json_out(
        run_cli(
            "approval",
            "create",
            "--action",
            "run.create",
            "--plan",
            str(plan_file),
            "--requested-by",
            "alice",
            "--json",
            cwd=workdir,
            env={"QINGLONG_APPROVAL_TTL_SECONDS": ttl_seconds},
        )
    )
    approval_id: str = created["approval_request_id"]
    return approval_id


@pytest.mark.slow
def test_a_timed_out_request_is_expired_by_tick_and_shown_so(workdir: Path) -> None:
    approval_id = _create_short_lived(workdir, "act-short", "0.05")
    shown = json_out(run_cli("approval", "show", approval_id, "--json", cwd=workdir))
    assert (shown["status"], shown["version"]) == ("pending", 1)
    report = json_out(run_cli("tick", "--once", "--json", cwd=workdir))
    assert report["reconcile"]["approvals_expired"] == 1
    shown = json_out(run_cli("approval", "show", approval_id, "--json", cwd=workdir))
    assert (shown["status"], shown["version"], shown["decided_by"]) == ("expired", 2, "expiry")
    text = run_cli("approval", "show", approval_id, cwd=workdir)
    assert text.returncode == 0
    assert f"{approval_id}  expired@v2  run.create  p1" in text.stdout
    refused = run_cli("approval", "approve", approval_id, "--by", "bob", cwd=workdir)
    assert_one_line_error(refused, 1)
    assert f"approval request {approval_id} has expired" in refused.stderr
    unknown = run_cli("approval", "show", "a-nope", cwd=workdir)
    assert_one_line_error(unknown, 1)


@pytest.mark.slow
def test_an_expired_approval_is_refused(workdir: Path) -> None:
    approval_id = _create_short_lived(workdir, "act-2", "0.001")
    expired = run_cli("approval", "approve", approval_id, "--by", "bob", cwd=workdir)
    assert_one_line_error(expired, 1)
    assert "expired" in expired.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "run-create", "--project", "p1", "--task", "t", "--revision", "abc"],
        ["submit", "run-create", "--project", "p1", "--task", "t", "--revision", "-4"],
        ["submit", "run-create", "--project", "../x", "--task", "t", "--revision", "1"],
        ["submit", "run-create", "--task", "t", "--revision", "1"],
        ["tick"],
        ["tick", "--drain", "--max-pages", "0"],
        ["submit", "run-create", "--from-jsonl", "plans.jsonl", "--project", "p1"],
        ["submit", "run-create", "--from-jsonl", "plans.jsonl", "--priority", "3"],
        [
            "approval",
            "create",
            "--action",
            "tool.invoke",
            "--plan",
            "plan.json",
            "--requested-by",
            "alice",
        ],
        ["nonsense"],
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(workdir: Path, args: list[str]) -> None:
    (workdir / "plans.jsonl").write_text('{"projectId":"p1","taskId":"t","taskRevision":1}\n')
    tool_plan = {
        "schemaVersion": 1,
        "actionRef": "act-1",
        "projectId": "p1",
        "runId": "r-1",
        "stepRunId": "s-1",
        "toolId": "builtin.file.write",
        "toolVersion": 1,
        "content": "x",
    }
    (workdir / "plan.json").write_text(json.dumps(tool_plan))
    result = run_cli(*args, cwd=workdir)
    assert_one_line_error(result, 2)
    if "tool.invoke" in args:
        assert "submit tool-invoke" in result.stderr  # a pointer to the command that works
    assert count(workdir, "SELECT count(*) FROM approval_requests") == 0
    assert count(workdir, "SELECT count(*) FROM execution_events") == 0


@pytest.mark.slow
def test_migrate_and_recovery_resolve_print_json(tmp_path: Path) -> None:
    first = json_out(run_cli("migrate", "--json", cwd=tmp_path))
    assert first["current"] is True
    assert first["applied"] == sorted(first["applied"])
    assert len(first["applied"]) >= 7
    assert json_out(run_cli("migrate", "--json", cwd=tmp_path)) == {"current": True, "applied": []}
    assert json_out(run_cli("migrate", "--check", "--json", cwd=tmp_path)) == {
        "current": True,
        "applied": [],
    }
    # resolve --json on something that is not recovery_required is refused in one line.
    resolve = ["recovery", "resolve", "d-" + "0" * 32, "--as", "failed"]
    refused = run_cli(
        *resolve, "--operator", "alice", "--reason", "checked", "--json", cwd=tmp_path
    )
    assert_one_line_error(refused, 1)
    assert refused.stdout == ""


@pytest.mark.parametrize(
    ("env", "code"),
    [
        ({"QINGLONG_PAGE_SIZE": "65"}, 78),
        ({"QINGLONG_PROFILE": "mainframe"}, 78),
        ({"QINGLONG_LEASE_SECONDS": "0"}, 78),
    ],
)
def test_bad_configuration_exits_78(workdir: Path, env: dict[str, str], code: int) -> None:
    result = run_cli("status", cwd=workdir, env=env)
    assert_one_line_error(result, code)
    assert next(iter(env)) in result.stderr


@pytest.mark.slow
def test_unmigrated_and_tampered_schemas_are_refused(tmp_path: Path) -> None:
    fresh = run_cli("tick", "--once", cwd=tmp_path)
    assert_one_line_error(fresh, 69)
    assert "run migrate first" in fresh.stderr
    assert run_cli("migrate", "--check", cwd=tmp_path).returncode == 69
    assert not (tmp_path / "var").exists()
    (tmp_path / "var").mkdir()
    sqlite3.connect(tmp_path / "var" / "qinglong.db").close()  # an empty file: unmigrated
    empty = run_cli("tick", "--once", cwd=tmp_path)
    assert_one_line_error(empty, 1)
    assert "migrat" in empty.stderr
    assert run_cli("migrate", "--check", cwd=tmp_path).returncode == 1
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    assert run_cli("migrate", "--check", cwd=tmp_path).returncode == 0
    conn = sqlite3.connect(tmp_path / "var" / "qinglong.db")
    conn.execute("UPDATE schema_migrations SET checksum = 'x' WHERE version = 1")
    conn.commit()
    conn.close()
    check = run_cli("migrate", "--check", cwd=tmp_path)
    assert check.returncode == 1
    assert "tampered" in check.stderr
    refused = run_cli("tick", "--once", cwd=tmp_path)
    assert_one_line_error(refused, 1)
    assert "tampered" in refused.stderr
    health = run_cli("health", "--json", cwd=tmp_path)
    assert health.returncode == 1
    assert json.loads(health.stdout) == {"ok": False, "reason": "schema_tampered"}


@pytest.mark.slow
def test_an_unopenable_store_exits_69(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("a file where a folder should be")
    result = run_cli("--database", "sqlite:///blocker/q.db", "migrate", cwd=tmp_path)
    assert_one_line_error(result, 69)
    assert "blocker" in result.stderr  # the path and the OS error are named
    (tmp_path / "a-folder.db").mkdir()
    folder = run_cli("--database", "sqlite:///a-folder.db", "migrate", cwd=tmp_path)
    assert_one_line_error(folder, 69)
    assert "a-folder.db cannot be used: unable to open database file" in folder.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [["status"], ["health"], ["recovery", "list"], ["migrate", "--check"], ["tick", "--once"]],
)
def test_commands_that_read_never_create_a_file_or_folder(tmp_path: Path, args: list[str]) -> None:
    """A mistyped path is an error naming it, never a new empty database."""
    result = run_cli("--database", "sqlite:///typo/qinglong.db", *args, cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    if args != ["health"]:
        assert_one_line_error(result, 69)
        assert "typo/qinglong.db does not exist" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_global_options_work_after_the_command(workdir: Path) -> None:
    result = run_cli(
        "status",
        "--profile",
        "edge",
        "--database",
        "sqlite:///var/qinglong.db",
        "--json",
        cwd=workdir,
    )
    assert json_out(result)["profile"] == "edge"
    mismatch = run_cli(
        "status", "--profile", "cluster", "--database", "sqlite:///x.db", cwd=workdir
    )
    assert_one_line_error(mismatch, 78)


@pytest.mark.slow
def test_tick_reconciles_and_recovery_commands_settle_by_hand(workdir: Path) -> None:
    out = json_out(
        run_cli(
            "submit",
            "run-create",
            "--project",
            "p1",
            "--task",
            "t1",
            "--revision",
            "1",
            "--json",
            cwd=workdir,
        )
    )
    dispatch_id = out["dispatch_id"]
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    # A dispatcher that died after the barrier: claimed, started, lease long gone (two steps:
    # the database allows only the state machine's own row changes).
    with conn:
        conn.execute(
            "UPDATE approved_action_dispatch_executions SET status = 'leased', version = 1, "
            "attempt = 1, lease_owner = 'dead:1', lease_token = 'tok', lease_expires_at_ms = 1, "
            "eligible_at_ms = 1 WHERE dispatch_id = ?",
            (dispatch_id,),
        )
        conn.execute(
            "UPDATE approved_action_dispatch_executions SET status = 'executing', version = 2, "
            "started_at_ms = 1, eligible_at_ms = NULL WHERE dispatch_id = ?",
            (dispatch_id,),
        )
    conn.close()
    report = json_out(run_cli("tick", "--once", "--json", cwd=workdir))
    assert report["reconcile"] == {
        "observed": 1,
        "outcomes": {"missing": 1},
        "approvals_expired": 0,
        "approval_reminders": 0,
        "windows_expired": 0,
    }
    listed = json_out(run_cli("recovery", "list", "--json", cwd=workdir))
    assert [row["dispatch_id"] for row in listed] == [dispatch_id]
    assert listed[0]["action_type"] == "run.create"
    assert listed[0]["last_observation"]["outcome"] == "missing"
    no_reason = run_cli(
        "recovery", "resolve", dispatch_id, "--as", "failed", "--operator", "ops", cwd=workdir
    )
    assert_one_line_error(no_reason, 2)
    bad_operator = run_cli(
        "recovery",
        "resolve",
        dispatch_id,
        "--as",
        "failed",
        "--operator",
        "a b",
        "--reason",
        "checked",
        cwd=workdir,
    )
    assert_one_line_error(bad_operator, 2)
    settle = ["recovery", "resolve", dispatch_id, "--as", "failed", "--operator", "ops"]
    settle += ["--reason", "checked_downstream", "--comment"]
    bad_comment = run_cli(*settle, "two\nlines", cwd=workdir)
    assert_one_line_error(bad_comment, 2)
    assert "comment: one printable line" in bad_comment.stderr
    assert count(workdir, "SELECT count(*) FROM recovery_resolutions") == 0
    done = run_cli(*settle, "no order 7 at the receiver", cwd=workdir)
    assert done.returncode == 0, done.stderr
    shown = run_cli("dispatch", "show", dispatch_id, cwd=workdir)
    assert "recovery.manual_resolution failed:checked_downstream by ops" in shown.stdout
    assert '"no order 7 at the receiver"' in shown.stdout
    again = run_cli(
        "recovery",
        "resolve",
        dispatch_id,
        "--as",
        "succeeded",
        "--operator",
        "ops",
        "--reason",
        "again",
        cwd=workdir,
    )
    assert_one_line_error(again, 1)
    assert json_out(run_cli("recovery", "list", "--json", cwd=workdir)) == []
    manual = "SELECT count(*) FROM security_audit_events WHERE kind = 'recovery.manual_resolution'"
    assert count(workdir, manual) == 1
    assert count(workdir, "SELECT count(*) FROM recovery_resolutions") == 1
    status = json_out(run_cli("status", "--json", cwd=workdir))
    assert status["executions"]["failed"] == 1


def test_the_readme_status_sample_is_what_status_prints(workdir: Path) -> None:
    """The command-line page's sample `status --json` has exactly the real output's keys, in
    its order."""
    readme = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    block = readme.split("qinglong-dispatcher status --json\n", 1)[1]
    sample_lines = []
    for line in block.splitlines():
        if not line.startswith("# "):
            break
        sample_lines.append(line[2:])
    sample = json.loads(" ".join(sample_lines))
    real = json_out(run_cli("status", "--json", cwd=workdir))

    def shape(value: object) -> object:
        if isinstance(value, dict):
            return [(k, shape(v)) for k, v in value.items()]
        return type(value).__name__

    assert shape(sample) == shape(real)


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_pasted(workdir: Path) -> None:
    """The quick-start block, run by bash from a folder laid out like the clone after
    `make run` (a `.venv` with the command, `./var/qinglong.db` migrated, `./var/plan-keys`)."""
    ring = workdir / "var" / "plan-keys"
    made = run_cli("keys", "generate", "--out", str(ring), cwd=workdir)
    assert made.returncode == 0, made.stderr
    # `make run` migrates with the ring configured, which registers its key.
    migrated = run_cli("migrate", cwd=workdir, env={"QINGLONG_PLAN_KEYRING_FILE": str(ring)})
    assert migrated.returncode == 0, migrated.stderr
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    after_marker = readme.split("<!-- quick-start:", 1)[1]
    block = after_marker.split("```sh\n", 1)[1].split("```", 1)[0]
    (workdir / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env["PATH"] = "/usr/bin:/bin"  # nothing of ours: the block puts the command on PATH itself
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "succeeded" in done.stdout
    assert "run_created" in done.stdout  # dispatch show: the result code of the Run it made
    assert "Traceback" not in done.stderr
