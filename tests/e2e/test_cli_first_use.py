"""What a newcomer meets first, through the real console script: Ctrl-C at any moment of a
command's start ends it quietly, a mistyped global option is named as such, every error has
the usual prefix, and every table column has a header."""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import SCRIPT, error_lines, json_out, run_cli

PREFIX = "qinglong-dispatcher: error: "


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert run_cli("migrate", cwd=tmp_path).returncode == 0
    return tmp_path


def _interpreter_start_s() -> float:
    """How long the interpreter takes to start and import the package's first module: before
    that no code of ours runs, and a SIGINT is Python's own business."""
    slowest = 0.0
    for _ in range(3):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import qinglong_dispatcher"], check=True)
        slowest = max(slowest, time.perf_counter() - began)
    return slowest


@pytest.mark.slow  # its signals are timed against the interpreter's start: one process alone
def test_ctrl_c_in_the_first_moments_of_a_command_prints_no_traceback(workdir: Path) -> None:
    """SIGINT at points spread over the first 0.3 s of `status` (the imports of argparse,
    pydantic, anyio and the commands, the settings, the store): always exit 130 and nothing on
    stderr, never a KeyboardInterrupt traceback, nor a native extension's panic, nor a command
    that carries on as if nothing happened."""
    start = _interpreter_start_s() + 0.005
    offsets = [start + i * max(0.3 - start, 0.05) / 29 for i in range(30)]
    seen = []
    for offset in offsets:
        process = subprocess.Popen(
            [str(SCRIPT), "status"],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(offset)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
        if _before_our_code(err):
            continue
        seen.append((round(offset, 3), process.returncode))
        assert "Traceback" not in err, (offset, err)
        assert "KeyboardInterrupt" not in err, (offset, err)
        assert "anic" not in err, (offset, err)  # pyo3's PanicException
        if process.returncode != 0:  # a status fast enough to finish before the signal: fine
            assert process.returncode == 130, (offset, process.returncode, err)
            assert err == "", (offset, err)
    assert len(seen) >= 20, seen
    assert any(code == 130 for _, code in seen), seen


def _before_our_code(err: str) -> bool:
    """Whether the signal came before the first line of the package ran: on a loaded machine
    one start may take longer than the slowest of `_interpreter_start_s`, and a SIGINT then
    interrupts the import statement of pip's script itself (its only frame), where no code of
    ours can answer it yet. Earlier still, it interrupts the interpreter's own start (its
    `site` import), which Python reports as a fatal error of its own."""
    lines = err.splitlines()
    if (
        err.startswith("Fatal Python error: init_import_site: Failed to import the site module")
        and lines[-1] == "KeyboardInterrupt"
        and "qinglong_dispatcher" not in err
    ):
        return True
    return (
        len(lines) == 4
        and lines[0] == "Traceback (most recent call last):"
        and lines[1].strip().startswith('File "')
        and lines[1].strip().endswith("in <module>")
        and lines[2].strip() == "from qinglong_dispatcher.console import main"
        and lines[3] == "KeyboardInterrupt"
    )


@pytest.mark.slow
def test_a_mistyped_global_option_is_named_not_taken_for_the_command(tmp_path: Path) -> None:
    result = run_cli("--profle", "cluster", "status", cwd=tmp_path)
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        PREFIX + "unrecognized option: --profle (did you mean --profile?)"
    ]
    assert result.stdout == ""
    # `=` and an unknown option without a near neighbour, neither echoing anything odd.
    assert error_lines(run_cli("--databse=x", "status", cwd=tmp_path).stderr) == [
        PREFIX + "unrecognized option: --databse (did you mean --database?)"
    ]
    assert error_lines(run_cli("--zzz", "status", cwd=tmp_path).stderr) == [
        PREFIX + "unrecognized option: --zzz"
    ]
    # A prefix argparse accepts still works; a wrong command is still reported as one.
    assert run_cli("--prof", "edge", "health", cwd=tmp_path).stdout == "not ok: store_unavailable\n"
    wrong = run_cli("--profile", "edge", "statuss", cwd=tmp_path)
    assert wrong.returncode == 2
    assert "invalid choice: 'statuss'" in wrong.stderr


def test_revoking_an_unknown_token_is_an_error_line_with_the_prefix(workdir: Path) -> None:
    result = run_cli("token", "revoke", "tok_0123456789abcdef", cwd=workdir)
    assert result.returncode == 1
    assert result.stdout == ""
    assert error_lines(result.stderr) == [PREFIX + "no token tok_0123456789abcdef"]
    odd = run_cli("token", "revoke", "\x1b[31mred", cwd=workdir)
    assert odd.returncode == 1
    assert error_lines(odd.stderr) == [PREFIX + "no token (not a token id)"]


@pytest.mark.slow
def test_token_list_shows_each_tokens_expiry_under_a_header(workdir: Path) -> None:
    helped = run_cli("token", "create", "--help", cwd=workdir)
    assert "(default: 30d)" in " ".join(helped.stdout.split())
    created = json_out(
        run_cli(
            "token", "create", "--principal", "sam", "--role", "submitter", "--json", cwd=workdir
        )
    )
    short = json_out(
        run_cli("token", "create", "--principal", "ann", "--expires", "2h", "--json", cwd=workdir)
    )
    # The default is 30 days.
    assert created["expires_at_ms"] - created["created_at_ms"] == 30 * 86_400_000
    listed = run_cli("token", "list", cwd=workdir)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == [
        "TOKEN", "PRINCIPAL", "ROLE", "STATE", "EXPIRES", "LAST", "USED", "GROUPS"
    ]  # fmt: skip
    by_id = {row.split()[0]: row.split() for row in rows}
    for token in (created, short):
        expires = datetime.datetime.fromtimestamp(token["expires_at_ms"] / 1000, tz=datetime.UTC)
        row = by_id[token["token_id"]]
        assert row[1:5] == [
            token["principal"],
            token["role"],
            "active",
            expires.isoformat(timespec="minutes").replace("+00:00", "Z"),
        ]
        assert row[5] == "-"  # never used
        assert row[6] == "-"  # in no approver group
    assert run_cli("token", "revoke", short["token_id"], cwd=workdir).returncode == 0
    rows = run_cli("token", "list", cwd=workdir).stdout.splitlines()[1:]
    assert {r.split()[0]: r.split()[3] for r in rows}[short["token_id"]] == "revoked"


@pytest.mark.slow
def test_every_column_of_dispatch_list_has_a_header(workdir: Path) -> None:
    submitted = run_cli(
        "submit", "run-create", "--project", "demo", "--task", "build", "--revision", "1",
        cwd=workdir,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    assert run_cli("tick", "--drain", cwd=workdir).returncode == 0
    listed = run_cli("dispatch", "list", cwd=workdir)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == [
        "DISPATCH", "STATUS", "ACTION", "PROJECT", "ATTEMPT", "CREATED", "RESULT"
    ]  # fmt: skip
    cells = row.split()
    assert len(cells) == len(header.split())
    assert cells[1] == "succeeded"
    assert cells[-1] == "run_created"
    # Each value starts under its header.
    for name, value in zip(header.split(), cells, strict=True):
        assert header.index(name) == row.index(value, header.index(name)), (name, value)
    # A waiting dispatch has no result yet: a dash, not a missing cell.
    run_cli(
        "submit", "run-create", "--project", "demo", "--task", "b2", "--revision", "1", cwd=workdir
    )
    newest = run_cli("dispatch", "list", "--limit", "1", cwd=workdir).stdout.splitlines()[1]
    assert newest.split()[1] == "pending"
    assert newest.split()[-1] == "-"
    assert json.loads(run_cli("dispatch", "list", "--json", cwd=workdir).stdout)["dispatches"]


HELD = """
import os, signal
from qinglong_dispatcher.commands import startup
done = []
try:
    with startup.held_interrupts():
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the imports below still run
        import pydantic, anyio
        done.append("imported")
except KeyboardInterrupt:
    print("interrupted after:", done, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_ctrl_c_during_the_imports_is_answered_once_they_are_done() -> None:
    """Deterministic where the test above samples: a real SIGINT in the middle of the held
    imports interrupts nothing until they are done, then ends the command, and Python's own
    handler is back."""
    done = subprocess.run(
        [sys.executable, "-c", HELD], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.stdout.strip() == "interrupted after: ['imported'] True", done.stderr


def test_every_missing_piece_of_a_plan_is_named_at_once(workdir: Path) -> None:
    """The flags `submit run-create` needs, and the fields of a plan file, all in one line."""
    flags = run_cli("submit", "run-create", "--project", "demo", cwd=workdir)
    assert flags.returncode == 2
    assert error_lines(flags.stderr) == [
        PREFIX + "--task, --revision are required without --from-jsonl"
    ]
    plan = workdir / "plan.json"
    plan.write_text(json.dumps({"schemaVersion": 1, "actionRef": "act-1", "projectId": "demo"}))
    created = run_cli(
        "approval", "create", "--action", "run.create", "--plan", str(plan),
        "--requested-by", "sam", cwd=workdir,
    )  # fmt: skip
    assert created.returncode == 2
    assert error_lines(created.stderr) == [
        PREFIX + "plan invalid: taskId, taskRevision, executorType, priority: "
        "required fields are missing"
    ]
