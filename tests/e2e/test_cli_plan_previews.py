"""Plans through the real console script, at debug log level, on both dialects: a value in a
sensitive member never reaches `dispatch show` (text or JSON) or `approval list`, the rest of
the plan does, and `dispatch show --plan` gives a plan reader the whole plan, audited."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.adapters.sqlite_file import os_user
from qinglong_dispatcher.domain import digests, ids, plan_previews, plans
from tests.support import stores
from tests.support.actions import DEFAULT_TTL_MS
from tests.support.cli import error_lines, json_out, run_cli
from tests.support.clock import ManualClock

MARKER = "customer-c41e-marker"
BODY = base64.b64encode(f'{{"email":"{MARKER}"}}'.encode()).decode()
PLAN_READER_LOGIN = stores.session_login("cli_plan_reader")


@dataclasses.dataclass
class Target:
    """One dialect's logins as the CLI takes them, and everything the runs printed."""

    dialect: str
    operator: list[str]
    approver: list[str]
    plan_reader: list[str]
    cwd: Path
    open_seeder: Any
    audit_rows: Any
    printed: list[str] = dataclasses.field(default_factory=list)

    def run(self, login: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        done = run_cli(*args, *login, cwd=self.cwd, env={"QINGLONG_LOG_LEVEL": "debug"})
        self.printed += [done.stdout, done.stderr]
        return done


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    if request.param == "sqlite":
        path = tmp_path / "q.db"
        login = ["--database", f"sqlite:///{path}"]
        assert run_cli("migrate", *login, cwd=tmp_path).returncode == 0

        async def open_sqlite() -> ports.Store:
            return await stores.open_sqlite(path, create=False)

        async def sqlite_audit() -> list[dict[str, Any]]:
            with contextlib.closing(sqlite3.connect(path)) as conn:
                conn.row_factory = sqlite3.Row
                found = conn.execute(
                    "SELECT kind, actor, principal, subject_id FROM security_audit_events "
                    "WHERE kind = 'plan.read'"
                ).fetchall()
            return [dict(row) for row in found]

        yield Target("sqlite", login, login, login, tmp_path, open_sqlite, sqlite_audit)
        return

    await stores.create_login(PLAN_READER_LOGIN, "qinglong_plan_reader")
    async with stores.fresh_database() as name:

        def cluster(url: str) -> list[str]:
            return ["--profile", "cluster", "--database", url]

        async def open_approver() -> ports.Store:
            return await stores.open_postgres(stores.approver_url(name), max_size=1)

        async def pg_audit() -> list[dict[str, Any]]:
            return await stores.raw(
                name,
                "SELECT kind, actor, principal, subject_id FROM qinglong.security_audit_events "
                "WHERE kind = 'plan.read'",
            )

        yield Target(
            "postgres",
            operator=cluster(stores.operator_url(name)),
            approver=cluster(stores.approver_url(name)),
            plan_reader=cluster(stores.pg_url(name, login=PLAN_READER_LOGIN)),
            cwd=tmp_path,
            open_seeder=open_approver,
            audit_rows=pg_audit,
        )


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
            "query": [["email", MARKER]],
            "headers": [["x-customer", MARKER]],
            "body": BODY,
            "contentType": "application/json",
        },
        models=builtin.PLAN_MODELS,
    )


async def _seed(t: Target) -> str:
    """Two waiting requests and one dispatch, all with the marker: the dispatch id."""
    store = await t.open_seeder()
    try:
        the_api = api.Api(
            store,
            ManualClock(int(time.time() * 1000)),  # the CLI lists on the real clock
            api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
            installed_plan_models=lambda: builtin.PLAN_MODELS,
        )
        for _ in range(2):
            await the_api.create_approval(
                "http.request", _plan().to_canonical_dict(), requested_by="alice"
            )
        (consumed,) = await the_api.submit([_plan()], requested_by="alice", approved_by="bob")
    finally:
        await store.close()
    return consumed.dispatch_id


@pytest.mark.slow
async def test_a_sensitive_value_never_reaches_show_or_approval_list_and_the_rest_does(
    target: Target,
) -> None:
    t = target
    dispatch_id = await _seed(t)
    body = plan_previews.redacted(BODY, digests.PLAIN)

    listed = json_out(t.run(t.approver, "approval", "list", "--json"))
    assert listed["next"] is None
    assert [row["plan"]["body"] for row in listed["approvals"]] == [body, body]
    assert {row["plan"]["receiver"] for row in listed["approvals"]} == {"orders"}
    assert {row["requested_by"] for row in listed["approvals"]} == {"alice"}
    text = t.run(t.approver, "approval", "list")
    assert text.returncode == 0, text.stderr
    assert "receiver=orders" in text.stdout
    assert f"body=<redacted {body['bytes']} B {body['digest']}>" in text.stdout

    shown = json_out(t.run(t.operator, "dispatch", "show", dispatch_id, "--json"))
    assert shown["plan_code"] is None
    assert (shown["plan"]["method"], shown["plan"]["path"]) == ("POST", "/orders")
    assert shown["plan"]["body"] == body
    assert all(shown["plan"][k]["redacted"] is True for k in ("query", "headers", "body"))
    text = t.run(t.operator, "dispatch", "show", dispatch_id)
    assert text.returncode == 0, text.stderr
    assert "path=/orders" in text.stdout

    assert all(MARKER not in printed for printed in t.printed)


@pytest.mark.slow
async def test_dispatch_show_plan_gives_a_plan_reader_the_whole_plan_with_one_audit_row(
    target: Target,
) -> None:
    t = target
    dispatch_id = await _seed(t)
    if t.dialect == "postgres":
        # An operator is no plan reader: one line, exit 1, nothing read and nothing audited.
        refused = t.run(t.operator, "dispatch", "show", dispatch_id, "--plan", "--json")
        assert refused.returncode == 1, refused.stderr
        assert refused.stdout == ""
        assert len(error_lines(refused.stderr)) == 1
        assert "plan reader" in refused.stderr
        assert await t.audit_rows() == []
    full = json_out(t.run(t.plan_reader, "dispatch", "show", dispatch_id, "--plan", "--json"))
    assert full["dispatch_id"] == dispatch_id
    assert full["plan"]["body"] == BODY
    assert full["plan"]["headers"] == [["x-customer", MARKER]]
    # The login on PostgreSQL, the OS user on edge: the principal the system authenticated.
    principal = PLAN_READER_LOGIN if t.dialect == "postgres" else os_user.os_principal()
    assert await t.audit_rows() == [
        {"kind": "plan.read", "actor": principal, "principal": principal, "subject_id": dispatch_id}
    ]
    text = t.run(t.plan_reader, "dispatch", "show", dispatch_id, "--plan")
    assert text.returncode == 0, text.stderr
    assert json.loads(text.stdout) == full["plan"]
