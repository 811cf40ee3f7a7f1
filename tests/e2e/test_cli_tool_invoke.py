"""`submit tool-invoke` on the edge profile: a real file once, and one clear line on refusal."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import json_out, run_cli


def _prepared(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    made = run_cli(
        "submit", "run-create", "--project", "p1", "--task", "t", "--revision", "1", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    assert run_cli("tick", "--once", cwd=tmp_path).returncode == 0
    (tmp_path / "var" / "tool-sandbox").mkdir()  # the edge default, relative to the cwd
    (tmp_path / "content.txt").write_text("hello from the CLI\n")
    return tmp_path


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """A migrated edge directory with one queued Run and the default sandbox."""
    return _prepared(tmp_path)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same, shared by the refusal tests (a refusal writes nothing)."""
    return _prepared(tmp_path_factory.mktemp("tool-cli"))


def query(workdir: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(workdir / "var" / "qinglong.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def run_id(workdir: Path) -> str:
    ((value,),) = query(workdir, "SELECT run_id FROM runs")
    return str(value)


def submit(
    workdir: Path, *extra: str, env: dict[str, str] | None = None, **options: str
) -> subprocess.CompletedProcess[str]:
    args = {
        "--project": "p1",
        "--run": run_id(workdir),
        "--tool": "builtin.file.write",
        "--content-file": "content.txt",
    }
    args.update({f"--{k.replace('_', '-')}": v for k, v in options.items()})
    flat = [item for pair in args.items() for item in pair]
    return run_cli("submit", "tool-invoke", *flat, *extra, cwd=workdir, env=env)


@pytest.mark.slow
def test_submit_tick_and_status(fresh: Path) -> None:
    workdir = fresh
    out = json_out(submit(workdir, "--json"))
    assert set(out) == {"dispatch_id", "approval_request_id", "action_ref", "step_run_id", "run_id"}
    assert out["run_id"] == run_id(workdir)
    assert query(workdir, "SELECT status, version FROM step_runs") == [("waiting_approval", 1)]
    report = json_out(run_cli("tick", "--drain", "--json", cwd=workdir))
    assert report["outcomes"] == {"succeeded": 1}
    written = workdir / "var" / "tool-sandbox" / "p1" / out["dispatch_id"]
    assert written.read_text() == "hello from the CLI\n"
    shown = run_cli("dispatch", "show", out["dispatch_id"], "--json", cwd=workdir)
    step = json_out(shown)["step_run"]
    assert (step["step_run_id"], step["status"]) == (out["step_run_id"], "succeeded")
    assert "hello from the CLI" not in shown.stdout  # the content only as its length
    status = json_out(run_cli("status", "--json", cwd=workdir))
    assert status["step_runs"] == {
        "ready": 0,
        "waiting_approval": 0,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "lost": 0,
    }
    plain = run_cli("status", cwd=workdir)
    assert "step_runs succeeded 1" in " ".join(plain.stdout.split())
    assert query(workdir, "SELECT count(*) FROM tool_execution_start_barriers") == [(1,)]


def _refused(workdir: Path, result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert text in lines[0]
    assert "Traceback" not in result.stderr
    assert query(workdir, "SELECT count(*) FROM step_runs") == [(0,)]
    assert query(
        workdir, "SELECT count(*) FROM approval_requests WHERE action_type = 'tool.invoke'"
    ) == [(0,)]
    assert not (workdir / "var" / "tool-sandbox" / "p1").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("project", "text"),
    [("..", "project: must match"), ("a/b", "project: must match"), ("../p1", "project")],
)
def test_a_project_id_that_would_leave_the_sandbox_is_refused(
    workdir: Path, project: str, text: str
) -> None:
    _refused(workdir, submit(workdir, project=project), 2, text)


def test_a_missing_sandbox_is_refused(workdir: Path) -> None:
    result = submit(workdir, env={"QINGLONG_TOOL_SANDBOX_DIR": str(workdir / "absent")})
    _refused(workdir, result, 78, "does not exist")


@pytest.mark.slow
def test_oversize_or_binary_content_is_refused(workdir: Path) -> None:
    (workdir / "big.txt").write_text("x" * (32 * 1024 + 1))
    _refused(workdir, submit(workdir, content_file="big.txt"), 2, "larger than 32768 bytes")
    (workdir / "binary.bin").write_bytes(b"\xff\xfe\x00")
    _refused(workdir, submit(workdir, content_file="binary.bin"), 2, "must be UTF-8 text")


def test_an_unknown_run_or_tool_is_refused(workdir: Path) -> None:
    _refused(workdir, submit(workdir, run="r-missing"), 1, "run r-missing not found")
    _refused(workdir, submit(workdir, tool="builtin.shell"), 2, "no reviewed built-in tool")


@pytest.mark.parametrize("field", ["path", "url", "secret", "targetPath"])
def test_a_plan_with_a_path_field_is_refused(workdir: Path, field: str) -> None:
    plan = {
        "schemaVersion": 1,
        "actionRef": "act-1",
        "projectId": "p1",
        "runId": run_id(workdir),
        "stepRunId": "s-1",
        "toolId": "builtin.file.write",
        "toolVersion": 1,
        "content": "x",
        field: "/etc/passwd",
    }
    (workdir / "plan.json").write_text(json.dumps(plan))
    result = run_cli(
        "approval",
        "create",
        "--action",
        "tool.invoke",
        "--plan",
        "plan.json",
        "--requested-by",
        "w",
        cwd=workdir,
    )
    _refused(workdir, result, 2, f"plan invalid: {field}: unknown field")
