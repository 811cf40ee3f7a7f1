"""`approval list --status` through the real console script on both dialects: a decided request
shows who decided (label and principal), how and when; `--status all` pages across statuses
with the one cursor format; a bad status is one line and exit 2."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import ids, plans
from tests.support import stores
from tests.support.actions import DEFAULT_TTL_MS
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.clock import ManualClock


@dataclasses.dataclass
class Target:
    """One dialect's CLI login and a way to open a store that seeds requests."""

    dialect: str
    login: list[str]
    cwd: Path
    open_seeder: Any

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, *self.login, cwd=self.cwd)


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "q.db"
        login = ["--database", f"sqlite:///{path}"]
        assert run_cli("migrate", *login, cwd=tmp_path).returncode == 0

        async def open_sqlite() -> ports.Store:
            return await stores.open_sqlite(path, create=False)

        yield Target("sqlite", login, tmp_path, open_sqlite)
        return
    async with stores.fresh_database() as name:

        async def open_approver() -> ports.Store:
            return await stores.open_postgres(stores.approver_url(name), max_size=1)

        login = ["--profile", "cluster", "--database", stores.approver_url(name)]
        yield Target("postgres", login, tmp_path, open_approver)


def _plan() -> plans.AnyPlan:
    return plans.parse_plan(
        "http.request",
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": "p1",
            "receiver": "orders",
            "method": "POST",
            "path": "/orders",
        },
        models=builtin.PLAN_MODELS,
    )


async def _seed(t: Target) -> dict[str, str]:
    """Two waiting requests, one rejected by `carol`, one consumed: each id by its status."""
    store = await t.open_seeder()
    try:
        the_api = api.Api(
            store,
            ManualClock(int(time.time() * 1000)),  # the CLI lists on the real clock
            api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
            installed_plan_models=lambda: builtin.PLAN_MODELS,
        )
        made = [
            await the_api.create_approval(
                "http.request", _plan().to_canonical_dict(), requested_by="alice"
            )
            for _ in range(3)
        ]
        await the_api.reject(made[0].approval_request_id, decided_by="carol")
        (consumed,) = await the_api.submit([_plan()], requested_by="alice", approved_by="bob")
    finally:
        await store.close()
    return {
        "rejected": made[0].approval_request_id,
        "pending1": made[1].approval_request_id,
        "pending2": made[2].approval_request_id,
        "consumed": consumed.approval_request_id,
    }


@pytest.mark.slow
async def test_rejected_rows_show_who_decided_how_and_when(target: Target) -> None:
    t = target
    seeded = await _seed(t)
    listed = json_out(t.run("approval", "list", "--status", "rejected", "--json"))
    assert listed["next"] is None
    (row,) = listed["approvals"]
    assert row["approval_request_id"] == seeded["rejected"]
    assert row["status"] == "rejected"
    assert row["decided_by"] == "carol"
    assert row["decided_principal"] == row["requested_principal"] != ""
    assert row["decision_code"] == "by_requester"
    assert row["decided_at_ms"] >= row["created_at_ms"]
    text = t.run("approval", "list", "--status", "rejected")
    assert text.returncode == 0, text.stderr
    assert f"{seeded['rejected']}  rejected" in text.stdout
    assert f"decided by carol ({row['decided_principal']})  why by_requester at " in text.stdout

    # The default stays the waiting queue, with nothing decided in it.
    waiting = json_out(t.run("approval", "list", "--json"))["approvals"]
    assert {r["approval_request_id"] for r in waiting} == {seeded["pending1"], seeded["pending2"]}
    assert {(r["status"], r["decided_by"], r["decided_at_ms"]) for r in waiting} == {
        ("pending", None, None)
    }
    consumed = json_out(t.run("approval", "list", "--status", "consumed", "--json"))["approvals"]
    assert [(r["approval_request_id"], r["decided_by"]) for r in consumed] == [
        (seeded["consumed"], "bob")
    ]
    assert consumed[0]["consumed_at_ms"] is not None


@pytest.mark.slow
async def test_status_all_pages_across_statuses_and_a_cursor_keeps_its_place(
    target: Target,
) -> None:
    t = target
    seeded = await _seed(t)
    whole = json_out(t.run("approval", "list", "--status", "all", "--json"))
    assert whole["next"] is None
    order = [r["approval_request_id"] for r in whole["approvals"]]
    assert sorted(order) == sorted(seeded.values())
    paged: list[str] = []
    statuses: set[str] = set()
    after: list[str] = []
    while True:
        page = json_out(
            t.run("approval", "list", "--status", "all", "--limit", "1", *after, "--json")
        )
        paged += [r["approval_request_id"] for r in page["approvals"]]
        statuses |= {r["status"] for r in page["approvals"]}
        if page["next"] is None:
            break
        after = ["--after", page["next"]]
    assert paged == order
    assert statuses == {"pending", "rejected", "consumed"}
    # A cursor is a place in the order of all requests: under another status it shows exactly
    # the rows of that status after the place.
    first = json_out(t.run("approval", "list", "--status", "all", "--limit", "1", "--json"))
    rest = json_out(
        t.run("approval", "list", "--status", "pending", "--after", first["next"], "--json")
    )
    expected = [i for i in order[1:] if i in (seeded["pending1"], seeded["pending2"])]
    assert [r["approval_request_id"] for r in rest["approvals"]] == expected


async def test_a_status_it_does_not_know_is_one_line_and_exit_2(target: Target) -> None:
    t = target
    refused = t.run("approval", "list", "--status", "decided")
    assert refused.returncode == 2
    assert refused.stdout == ""
    (line,) = error_lines(refused.stderr)
    assert line.startswith("qinglong-dispatcher: error: argument --status: invalid choice")


async def test_a_decisions_comment_is_kept_and_listed_and_a_bad_one_writes_nothing(
    target: Target,
) -> None:
    t = target
    seeded = await _seed(t)
    pending1, pending2 = seeded["pending1"], seeded["pending2"]
    for bad in ("two\nlines", "x" * 501):
        refused = t.run("approval", "reject", pending1, "--by", "carol", "--comment", bad)
        assert refused.returncode == 2
        assert refused.stdout == ""
        (line,) = error_lines(refused.stderr)
        assert "comment: one printable line of 1 to 500 characters" in line
    still = json_out(t.run("approval", "show", pending1, "--json"))
    assert still["status"] == "pending"

    done = t.run("approval", "reject", pending1, "--by", "carol", "--comment", "dup of t9")
    assert done.returncode == 0, done.stderr
    done = t.run("approval", "approve", pending2, "--by", "bob", "--comment", "checked the diff")
    assert done.returncode == 0, done.stderr
    rejected = json_out(t.run("approval", "list", "--status", "rejected", "--json"))["approvals"]
    by_id = {r["approval_request_id"]: r["reasons"] for r in rejected}
    assert [(r["decision"], r["comment"]) for r in by_id[pending1]] == [("reject", "dup of t9")]
    assert by_id[seeded["rejected"]] == []  # the seeded reject carried none
    approved = json_out(t.run("approval", "list", "--status", "approved", "--json"))["approvals"]
    assert [(r["decision"], r["comment"]) for r in approved[0]["reasons"]] == [
        ("approve", "checked the diff")
    ]
    text = t.run("approval", "list", "--status", "approved")
    assert "approve by " in text.stdout
    assert ': "checked the diff"' in text.stdout


async def test_a_time_range_bounds_both_lists_and_bad_bounds_are_one_line(target: Target) -> None:
    t = target
    seeded = await _seed(t)
    every = {seeded["pending1"], seeded["pending2"]}

    def listed(*args: str) -> set[str]:
        out = json_out(t.run("approval", "list", *args, "--json"))
        return {r["approval_request_id"] for r in out["approvals"]}

    assert listed("--from", "1h") == every
    assert listed("--to", "1h") == set()
    assert listed("--from", "2000-01-01T00:00:00Z", "--to", "2999-01-01T00:00:00+02:00") == every
    assert listed("--status", "all", "--from", "2999-01-01T00:00:00Z") == set()
    assert listed("--status", "all", "--from", "10m") == set(seeded.values())

    def dispatches(*args: str) -> list[str]:
        out = json_out(t.run("dispatch", "list", *args, "--json"))
        return [r["dispatch_id"] for r in out["dispatches"]]

    (only,) = dispatches("--from", "1h")
    assert dispatches("--to", "1h") == []
    assert dispatches("--target", "nas-9") == []
    assert dispatches("--from", "2000-01-01T00:00:00Z") == [only]

    for command, bad, said in (
        (
            "approval",
            ["--from", "yesterday"],
            "argument --from: not an ISO 8601 time nor a duration",
        ),
        ("approval", ["--to", "2026-01-01T00:00"], "argument --to: give the time zone"),
        ("dispatch", ["--from", "1h", "--to", "2h"], "argument --to: must be after --from"),
        ("dispatch", ["--from", "9999d"], "is not between 1 second and 3650 days"),
        ("dispatch", ["--target", "a b"], "target"),
    ):
        refused = t.run(command, "list", *bad)
        assert refused.returncode == 2, refused.stderr
        assert refused.stdout == ""
        (line,) = error_lines(refused.stderr)
        assert said in line
