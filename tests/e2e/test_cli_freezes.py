"""Freezes and windows through the real console script on the edge profile: `freeze add`
holds a submitted dispatch (`dispatch list` says `frozen_by F`, `tick` claims nothing), the
requester's own `dispatch lift-freeze` is one line (exit 1, nothing lifted: on edge the OS
user requested), `freeze end` lets the next tick run it; a policy's window shows in `policy
list` and `dispatch show`. Bad input is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import error_lines, json_out, run_cli

DB = ("--profile", "edge", "--database", "sqlite:///w.db")


def _cli(tmp_path: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli(*args, *DB, cwd=tmp_path)


@pytest.mark.slow
def test_a_freeze_holds_a_dispatch_until_it_ends(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    submitted = json_out(
        _cli(
            tmp_path,
            "submit",
            "run-create",
            "--project",
            "p1",
            "--task",
            "t",
            "--revision",
            "1",
            "--json",
        )
    )
    dispatch_id = submitted["dispatch_id"]
    added = json_out(
        _cli(tmp_path, "freeze", "add", "--until", "2h", "--reason", "release", "--json")
    )
    freeze_id = added["freeze_id"]
    assert added["ended_at_ms"] is None

    listed = _cli(tmp_path, "dispatch", "list")
    assert f"frozen_by {freeze_id}" in listed.stdout
    rows = json_out(_cli(tmp_path, "dispatch", "list", "--json"))["dispatches"]
    assert rows[0]["wait"] == {"reason": "frozen_by", "freeze_id": freeze_id, "not_before_ms": None}
    tick = json_out(_cli(tmp_path, "tick", "--once", "--json"))
    assert tick["claims"] == {}, tick
    assert tick["observed"] == 0, tick

    refused = _cli(tmp_path, "dispatch", "lift-freeze", dispatch_id, "--reason", "mine")
    assert refused.returncode == 1
    assert len(error_lines(refused.stderr)) == 1
    assert "requester" in refused.stderr

    ended = _cli(tmp_path, "freeze", "end", str(freeze_id))
    assert ended.returncode == 0, ended.stderr
    assert _cli(tmp_path, "freeze", "list").stdout.strip() == "no freezes"
    json_out(_cli(tmp_path, "tick", "--once", "--json"))
    shown = json_out(_cli(tmp_path, "dispatch", "show", dispatch_id, "--json"))
    assert shown["execution"]["status"] == "succeeded", shown["execution"]


@pytest.mark.slow
def test_bad_freezes_and_windows_are_one_line(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    for args in (
        ("freeze", "add", "--until", "yesterday", "--reason", "x"),
        ("freeze", "add", "--until", "2h", "--from", "3h", "--reason", "x"),
        ("freeze", "add", "--until", "2026-12-24T08:00", "--reason", "x"),
        ("freeze", "add", "--until", "2h", "--target-prefix", "prod-*", "--reason", "x"),
        ("policy", "set", "p", "--action", "run.create", "--approvals", "1", "--window", "0s"),
    ):
        result = _cli(tmp_path, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(error_lines(result.stderr)) == 1, result.stderr
    assert json_out(_cli(tmp_path, "freeze", "list", "--all", "--json")) == []
    assert _cli(tmp_path, "freeze", "end", "7").returncode == 1


def test_a_policy_window_shows_and_holds(tmp_path: Path) -> None:
    assert _cli(tmp_path, "migrate").returncode == 0
    policy = _cli(
        tmp_path,
        "policy",
        "set",
        "later",
        "--action",
        "run.create",
        "--approvals",
        "1",
        "--not-before-delay",
        "1h",
        "--window",
        "2h",
    )
    assert policy.returncode == 0, policy.stderr
    assert "not-before-delay=1h window=2h" in policy.stdout
