"""The requester's narrowing of the window through the real console script on the edge
profile: `submit run-create --not-before T --window-for D` and `approval create` with the same
flags write the window into the dispatch (`dispatch show` says `not_before T`), and `approval
show` and `approval list` show a request's narrowing to its approvers; a narrowing
that ended already is one line, exit 1, and a malformed one one line, exit 2; neither writes
anything."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from tests.support.cli import error_lines, json_out, run_cli

DB = ("--profile", "edge", "--database", "sqlite:///w.db")
SUBMIT = ("submit", "run-create", "--project", "p1", "--revision", "1")
HOUR_MS = 3_600_000


def _cli(tmp_path: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli(*args, *DB, cwd=tmp_path)


def test_a_submit_narrows_its_dispatchs_window(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    start = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)
    shown_start = start.replace(microsecond=0)
    submitted = json_out(
        _cli(
            tmp_path,
            *SUBMIT,
            "--task",
            "t1",
            "--not-before",
            shown_start.isoformat(),
            "--window-for",
            "1h",
            "--json",
        )
    )
    dispatch_id = submitted["dispatch_id"]
    shown = json_out(_cli(tmp_path, "dispatch", "show", dispatch_id, "--json"))
    start_ms = int(shown_start.timestamp() * 1000)
    execution = shown["execution"]
    assert execution["window"] == {"not_before_ms": start_ms, "not_after_ms": start_ms + HOUR_MS}
    assert execution["wait"]["reason"] == "not_before"
    assert execution["on_unknown"] == "hold"
    assert "not_before" in _cli(tmp_path, "dispatch", "show", dispatch_id).stdout
    tick = json_out(_cli(tmp_path, "tick", "--once", "--json"))
    assert tick["claims"] == {}, tick

    # `approval create` takes the same flags; a DURATION is from now.
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "actionRef": "run-t2",
                "projectId": "p1",
                "taskId": "t2",
                "taskRevision": 1,
                "executorType": "shell",
                "priority": 0,
            }
        ),
        encoding="utf-8",
    )
    created = _cli(
        tmp_path,
        "approval",
        "create",
        "--action",
        "run.create",
        "--plan",
        str(plan),
        "--requested-by",
        "sam",
        "--not-before",
        "3h",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    request = json.loads(created.stdout)
    assert request["status"] == "pending"
    # What the approvers read carries the narrowing they approve with the request.
    approval_id = request["approval_request_id"]
    shown_request = json_out(_cli(tmp_path, "approval", "show", approval_id, "--json"))
    assert shown_request["window_for_ms"] is None
    later = shown_request["not_before_ms"] - shown_request["created_at_ms"]
    assert 3 * HOUR_MS - 60_000 <= later <= 3 * HOUR_MS, shown_request
    opens = datetime.datetime.fromtimestamp(shown_request["not_before_ms"] / 1000, datetime.UTC)
    words = f"window not before {opens.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
    assert words in _cli(tmp_path, "approval", "show", approval_id).stdout
    assert f"  {words}\n" in _cli(tmp_path, "approval", "list").stdout
    listed = json_out(_cli(tmp_path, "approval", "list", "--json"))["approvals"]
    assert [(a["not_before_ms"], a["window_for_ms"]) for a in listed] == [
        (shown_request["not_before_ms"], None)
    ]


def test_a_bad_or_empty_narrowing_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    for extra, code in (
        (("--not-before", "tomorrow"), 2),
        (("--not-before", "2026-12-24T08:00"), 2),
        (("--window-for", "0s"), 2),
        (("--window-for", "31d"), 2),
        (("--not-before", "2001-01-01T00:00:00Z", "--window-for", "1h"), 1),
    ):
        result = _cli(tmp_path, *SUBMIT, "--task", "t1", *extra)
        assert result.returncode == code, (extra, result.stderr)
        lines = error_lines(result.stderr)
        assert len(lines) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert "window ends before it can start" in result.stderr
    status = json_out(_cli(tmp_path, "status", "--json"))
    assert sum(status["executions"].values()) == 0


def test_a_policys_rule_on_an_unknown_outcome_shows(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    base = ("policy", "set", "p", "--action", "run.create", "--approvals", "1")
    held = _cli(tmp_path, *base)
    assert held.returncode == 0, held.stderr
    assert "on-unknown=hold" in held.stdout
    proceeding = json_out(_cli(tmp_path, *base, "--proceed-on-unknown", "--json"))
    assert proceeding["proceed_on_unknown"] is True
    assert "on-unknown=proceed" in _cli(tmp_path, "policy", "list").stdout
    assert "on-unknown=proceed" in _cli(tmp_path, "policy", "show", "p").stdout
    both = _cli(tmp_path, *base, "--hold-on-unknown", "--proceed-on-unknown")
    assert both.returncode == 2
    assert len(error_lines(both.stderr)) == 1
