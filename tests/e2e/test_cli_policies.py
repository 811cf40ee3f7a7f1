"""`policy set|list|show|delete` through the real console script on both profiles, and a
request under a policy with a lifetime: the database sets its life and the daemon's reconcile
pass writes its one `approval.expiring` event before expiring it."""

from __future__ import annotations

import dataclasses
import json
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import daemon, stores
from tests.support.cli import error_lines, json_out, run_cli

PLAN = {
    "schemaVersion": 1,
    "actionRef": "act-policy",
    "projectId": "p1",
    "taskId": "t1",
    "taskRevision": 2,
    "executorType": "shell",
    "priority": 0,
}


@dataclasses.dataclass(frozen=True)
class Setup:
    """One profile's database and the logins the commands run as."""

    cwd: Path
    owner: tuple[str, ...]
    """The schema's owner: the administrator URL on PostgreSQL, the file's owner on SQLite."""
    requester: tuple[str, ...]
    runtime: tuple[str, ...]
    daemon_env: dict[str, str]
    rows: Callable[[str], Awaitable[list[dict[str, Any]]]]
    """A query of the database as its administrator; `{s}` stands for the schema prefix."""

    async def cli(self, login: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
        return await anyio.to_thread.run_sync(lambda: run_cli(*args, *login, cwd=self.cwd))

    async def count(self, sql: str) -> int:
        return int((await self.rows(f"SELECT count(*) AS n FROM {sql}"))[0]["n"])


def _sqlite_rows(path: Path) -> Callable[[str], Awaitable[list[dict[str, Any]]]]:
    async def rows(sql: str) -> list[dict[str, Any]]:
        conn = sqlite3.connect(path)
        conn.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in conn.execute(sql.replace("{s}", ""))]
        finally:
            conn.close()

    return rows


@pytest.fixture(params=["edge", pytest.param("cluster", marks=pytest.mark.postgres)])
async def setup(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Setup]:
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    if request.param == "edge":
        assert run_cli("migrate", cwd=tmp_path).returncode == 0
        yield Setup(
            cwd=tmp_path,
            owner=(),
            requester=(),
            runtime=(),
            daemon_env={},
            rows=_sqlite_rows(tmp_path / "var" / "qinglong.db"),
        )
        return
    async with stores.fresh_database() as database:

        async def rows(sql: str) -> list[dict[str, Any]]:
            return await stores.raw(database, sql.replace("{s}", "qinglong."))

        def cluster(url: str) -> tuple[str, ...]:
            return ("--profile", "cluster", "--database", url)

        yield Setup(
            cwd=tmp_path,
            owner=cluster(stores.pg_url(database)),
            requester=cluster(stores.approver_url(database)),
            runtime=cluster(stores.runtime_url(database)),
            daemon_env={
                "QINGLONG_PROFILE": "cluster",
                "QINGLONG_DATABASE_URL": stores.runtime_url(database),
            },
            rows=rows,
        )


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


@pytest.mark.slow
async def test_set_list_show_delete_round_trip(setup: Setup) -> None:
    first = json_out(
        await setup.cli(
            setup.owner,
            "policy",
            "set",
            "two-for-runs",
            "--action",
            "run.create",
            "--approvals",
            "2",
            "--group",
            "ops",
            "--group",
            "sre",
            "--denials",
            "2",
            "--reason-required",
            "--lifetime",
            "4h",
            "--remind-before",
            "30m",
            "--json",
        )
    )
    assert {k: first[k] for k in ("name", "version", "approvals_required", "retired")} == {
        "name": "two-for-runs",
        "version": 1,
        "approvals_required": 2,
        "retired": False,
    }
    assert first["approver_groups"] == ["ops", "sre"]
    assert (first["denials_to_reject"], first["reason_required"]) == (2, True)
    assert (first["lifetime_ms"], first["remind_before_ms"]) == (4 * 3_600_000, 30 * 60_000)
    assert first["written_by"]
    second = await setup.cli(
        setup.owner, "policy", "set", "two-for-runs", "--action", "run.create", "--approvals", "3"
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith(
        "set two-for-runs@v2  run.create  *  target-prefix=-  approvals=3"
    )

    listed = json_out(await setup.cli(setup.owner, "policy", "list", "--json"))
    assert [(p["name"], p["version"], p["lifetime_ms"]) for p in listed] == [
        ("two-for-runs", 2, None)
    ]
    shown = json_out(await setup.cli(setup.owner, "policy", "show", "two-for-runs", "--json"))
    assert shown["in_force"]["version"] == 2
    assert [v["version"] for v in shown["versions"]] == [2, 1]
    assert all(v["written_by"] == first["written_by"] for v in shown["versions"])
    text = await setup.cli(setup.owner, "policy", "show", "two-for-runs")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[1].startswith("  v2  set ")

    retired = json_out(await setup.cli(setup.owner, "policy", "delete", "two-for-runs", "--json"))
    assert (retired["version"], retired["retired"], retired["approvals_required"]) == (3, True, 3)
    assert json_out(await setup.cli(setup.owner, "policy", "list", "--json")) == []
    everything = json_out(await setup.cli(setup.owner, "policy", "list", "--all", "--json"))
    assert [(p["version"], p["retired"]) for p in everything] == [(3, True)]
    shown = json_out(await setup.cli(setup.owner, "policy", "show", "two-for-runs", "--json"))
    assert shown["in_force"] is None
    again = _one_line(await setup.cli(setup.owner, "policy", "delete", "two-for-runs"), 1)
    assert "no approval policy two-for-runs is in force" in again
    assert "no approval policy nope" in _one_line(
        await setup.cli(setup.owner, "policy", "show", "nope"), 1
    )
    audit = await setup.rows(
        "SELECT kind, detail_code FROM {s}security_audit_events "
        "WHERE subject_id = 'two-for-runs' ORDER BY detail_code"
    )
    assert [(a["kind"], a["detail_code"]) for a in audit] == [
        ("approval.policy_set", "1"),
        ("approval.policy_set", "2"),
        ("approval.policy_retired", "3"),
    ]


BAD_INPUT = [
    (("--approvals", "0"), "approvals must be 1…100"),
    (("--approvals", "101"), "approvals must be 1…100"),
    (("--approvals", "two"), "invalid int value"),
    (("--approvals", "1", "--denials", "0"), "denials must be 1…100"),
    (("--approvals", "1", "--group", "Ops"), "approver group 'Ops'"),
    (("--approvals", "1", "--group", "ops;drop"), "approver group '?'"),
    (("--approvals", "1", "--group", "ops", "--group", "ops"), "named twice"),
    (("--approvals", "1", "--lifetime", "2w"), "not a number of seconds"),
    (("--approvals", "1", "--lifetime", "31d"), "between 1 second and 30 days"),
    (("--approvals", "1", "--remind-before", "0s"), "not a number of seconds"),
    (("--approvals", "1", "--lifetime", "2s", "--remind-before", "2s"), "before the end"),
]


@pytest.mark.slow
async def test_bad_input_is_one_line_exit_2_and_writes_nothing(setup: Setup) -> None:
    base = ("policy", "set", "p1", "--action", "run.create")
    for extra, said in BAD_INPUT:
        line = _one_line(await setup.cli(setup.owner, *base, *extra), 2)
        assert said in line, (extra, line)
    unknown = await setup.cli(
        setup.owner, "policy", "set", "p1", "--action", "no.such", "--approvals", "1"
    )
    assert "unknown action type" in _one_line(unknown, 2)
    bad_name = await setup.cli(
        setup.owner, "policy", "set", "Bad Name", "--action", "run.create", "--approvals", "1"
    )
    assert "policy name" in _one_line(bad_name, 2)
    assert await setup.count("{s}approval_policies") == 0
    assert await setup.count("{s}security_audit_events WHERE kind LIKE 'approval.policy%'") == 0


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize("setup", ["cluster"], indirect=True)
async def test_a_login_that_does_not_own_the_schema_is_refused_by_the_database(
    setup: Setup,
) -> None:
    """PostgreSQL's logins (on SQLite the file's permissions keep other users out)."""
    args = ("policy", "set", "p1", "--action", "run.create", "--approvals", "1")
    for login in (setup.requester, setup.runtime):
        line = _one_line(await setup.cli(login, *args), 1)
        assert "only the schema's owner writes approval policies" in line
    assert await setup.count("{s}approval_policies") == 0
    assert (await setup.cli(setup.owner, *args)).returncode == 0
    line = _one_line(await setup.cli(setup.requester, "policy", "delete", "p1"), 1)
    assert "only the schema's owner" in line
    versions = await setup.rows("SELECT version, retired FROM {s}approval_policies")
    assert [(v["version"], v["retired"]) for v in versions] == [(1, False)]
    assert await setup.count("{s}security_audit_events WHERE kind LIKE 'approval.policy%'") == 1


@pytest.mark.slow
async def test_a_request_lives_its_policys_lifetime_and_is_reminded_once(setup: Setup) -> None:
    written = await setup.cli(
        setup.owner,
        "policy",
        "set",
        "short",
        "--action",
        "run.create",
        "--approvals",
        "1",
        "--lifetime",
        "2s",
        "--remind-before",
        "1s",
    )
    assert written.returncode == 0, written.stderr
    port = daemon.free_port()
    env = {
        **setup.daemon_env,
        "QINGLONG_CADENCE_SECONDS": "0.05",
        "QINGLONG_RECONCILE_SECONDS": "0.1",
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port),
    }
    with daemon.running(setup.cwd, env) as running:
        await anyio.to_thread.run_sync(lambda: daemon.wait_until(lambda: daemon.ready(port)))
        # The caller asks for the settings' lifetime (a day): the policy's two seconds win.
        created = json_out(
            await setup.cli(
                setup.requester,
                "approval",
                "create",
                "--action",
                "run.create",
                "--plan",
                "plan.json",
                "--requested-by",
                "alice",
                "--json",
            )
        )
        request = created["approval_request_id"]

        def expired() -> bool:
            shown = json_out(
                run_cli("approval", "show", request, "--json", *setup.requester, cwd=setup.cwd)
            )
            return bool(shown["status"] == "expired")

        await anyio.to_thread.run_sync(lambda: daemon.wait_until(expired, timeout=30))
        metrics = daemon.metric_values(daemon.get(port, "/metrics")[1])
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=30) == 0, running.stderr
    assert metrics["qinglong_dispatcher_approval_reminders_total"] == 1
    assert metrics["qinglong_dispatcher_approvals_expired_total"] == 1

    where = f"WHERE approval_request_id = '{request}'"
    row = (await setup.rows(f"SELECT * FROM {{s}}approval_requests {where}"))[0]
    assert row["expires_at_ms"] - row["created_at_ms"] == 2000
    created_at = (
        await setup.rows(
            "SELECT committed_at_ms FROM {s}security_audit_events "
            f"WHERE subject_id = '{request}' AND kind = 'approval.created'"
        )
    )[0]["committed_at_ms"]
    # The database's clock: two seconds from when it wrote the request.
    assert 2000 <= row["db_expires_at_ms"] - created_at <= 2500
    copy = (await setup.rows(f"SELECT * FROM {{s}}approval_request_policies {where}"))[0]
    assert (copy["policy_name"], copy["lifetime_ms"], copy["remind_before_ms"]) == (
        "short",
        2000,
        1000,
    )
    events = await setup.rows(f"SELECT kind, at_ms FROM {{s}}approval_events {where}")
    assert [e["kind"] for e in events] == ["approval.expiring"]
    assert row["db_expires_at_ms"] - 1000 <= events[0]["at_ms"] < row["db_expires_at_ms"]
    # Once: another pass writes no second reminder for it.
    report = json_out(await setup.cli(setup.runtime, "tick", "--once", "--json"))
    assert report["reconcile"]["approval_reminders"] == 0
    assert await setup.count(f"{{s}}approval_events {where}") == 1
