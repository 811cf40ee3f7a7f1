"""`audit export` through the real console script, on both dialects: killed with SIGKILL while
writers commit and restarted from the last cursor it wrote, it has exported every record once
and in order; stopped with SIGTERM it prints the cursor to resume from; bad input is one line,
exit 2; no secret reaches any form."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import ids, plans
from tests.contract.test_audit_export import Key, database_rows, eventually, in_id_order
from tests.contract.test_postgres_audit_export import LATE_AUDIT
from tests.support import stores
from tests.support.actions import DEFAULT_TTL_MS, submit_runs
from tests.support.cli import SCRIPT, error_lines, run_cli
from tests.support.clock import ManualClock

EPOCH = "1970-01-01T00:00:00Z"
ENV = {"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_INSTALLATION": stores.INSTALLATION}
MARKER = "customer-5e1a-marker"


async def login(h: stores.Harness, *, admin: bool = False) -> list[str]:
    """The CLI arguments of the harness's store (the runtime login on PostgreSQL)."""
    if h.dialect == "sqlite":
        path = await h.scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
        return ["--profile", "edge", "--database", f"sqlite:///{path}"]
    name = str(await h.scalar("SELECT current_database()"))
    url = stores.pg_url(name) if admin else stores.runtime_url(name)
    return ["--profile", "cluster", "--database", url]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    return {**env, **ENV}


def _start(args: list[str], out: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink, out.with_suffix(".err").open("wb") as errors:
        return subprocess.Popen(
            [str(SCRIPT), "audit", "export", *args],
            stdout=sink,
            stderr=errors,
            cwd=cwd,
            env=_clean_env(),
        )


def _lines(out: Path) -> list[dict[str, Any]]:
    """The whole lines written so far (a line cut by SIGKILL is not a record written)."""
    text = out.read_bytes().decode()
    whole = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in whole.splitlines()]


def _keys(lines: list[dict[str, Any]]) -> list[Key]:
    return [(line["source"], line["event_id"]) for line in lines]


@pytest.mark.slow
async def test_killed_and_restarted_it_exports_every_record_once_in_order(
    harness: stores.Harness, tmp_path: Path
) -> None:
    h = harness
    clock = ManualClock()
    cli = await login(h)
    await submit_runs(h.approver_store, clock, 2)
    late: Any = None
    writer: Any = None
    if h.dialect == "postgres":
        writer = await asyncpg.connect(
            stores.runtime_url(str(await h.scalar("SELECT current_database()")))
        )
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first = _start([*cli, "--since", EPOCH, "--follow", "--page-size", "3"], first_out, tmp_path)
    written = 0
    enough = anyio.Event()
    try:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    nonlocal written
                    n = 0
                    while not enough.is_set():
                        await submit_runs(h.approver_store, clock, 1, project=f"w{n}")
                        written = n = n + 1
                        await anyio.sleep(0.05)

                tg.start_soon(write)
                await eventually(lambda: len(_lines(first_out)) >= 10)
                if writer is not None:
                    # A transaction that draws an id now and commits after the restart.
                    late = writer.transaction()
                    await late.start()
                    await writer.fetchval(LATE_AUDIT)
                await eventually(lambda: written >= 4)
                first.kill()  # SIGKILL, writers still committing
                first.wait()
                before = _lines(first_out)
                cursor = before[-1]["cursor"]
                second = _start([*cli, "--after", cursor, "--follow"], second_out, tmp_path)
                # Running (its first record out) while the writers still commit.
                await eventually(lambda: len(_lines(second_out)) > 0)
                # Some more commits while the restarted exporter runs, then the writers stop.
                running_at = written
                await eventually(lambda: written >= running_at + 5)
                enough.set()
        if late is not None:
            await anyio.sleep(0.2)
            await late.commit()
        wanted = await database_rows(h)
        with anyio.move_on_after(30):  # then the assertions below say what is missing
            await eventually(lambda: len(before) + len(_lines(second_out)) >= len(wanted))
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
        stderr = second_out.with_suffix(".err").read_text()
    finally:
        for process in (first, locals().get("second")):
            if isinstance(process, subprocess.Popen) and process.poll() is None:
                process.kill()
                process.wait()
        if writer is not None:
            await writer.close()
    assert first.returncode == -signal.SIGKILL
    assert second.returncode == 0, stderr
    after = _lines(second_out)
    union = _keys(before) + _keys(after)
    assert len(set(union)) == len(union), "a record exported twice"
    assert sorted(union) == sorted(await database_rows(h)), "a record skipped"
    assert in_id_order(union)
    assert f"resume with --after {after[-1]['cursor']}" in stderr


def _http_plan() -> plans.AnyPlan:
    return plans.parse_plan(
        "http.request",
        {
            "schemaVersion": 1,
            "actionRef": ids.new_action_ref(),
            "projectId": "p1",
            "receiver": "orders",
            "method": "POST",
            "path": "/orders",
            "query": [],
            "headers": [["x-api-key", MARKER]],
            "body": "",
            "contentType": "application/json",
        },
        models=builtin.PLAN_MODELS,
    )


@pytest.mark.slow
async def test_no_secret_reaches_an_export_in_any_form(
    harness: stores.Harness, tmp_path: Path
) -> None:
    h = harness
    created = run_cli(
        "token",
        "create",
        "--principal",
        "alice",
        "--json",
        *await login(h, admin=True),
        cwd=tmp_path,
        env=ENV,
    )
    assert created.returncode == 0, created.stderr
    secret = json.loads(created.stdout)["secret"]
    the_api = api.Api(
        h.approver_store,
        ManualClock(int(time.time() * 1000)),
        api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
        installed_plan_models=lambda: builtin.PLAN_MODELS,
    )
    await the_api.submit([_http_plan()], requested_by="alice", approved_by="bob")
    printed = []
    for form in ("jsonl", "cef"):
        done = run_cli(
            "audit",
            "export",
            "--since",
            EPOCH,
            "--format",
            form,
            *await login(h),
            cwd=tmp_path,
            env=ENV,
        )
        assert done.returncode == 0, done.stderr
        assert "approval.consumed" in done.stdout
        printed += [done.stdout, done.stderr]
    digest = hashlib.sha256(secret.encode()).hexdigest()
    for text in printed:
        assert secret not in text
        assert digest not in text
        assert MARKER not in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "yesterday"], "--since: must be an RFC 3339 time"),
        (["--since", "2026-12-01T00:00:00"], "--since: must be an RFC 3339 time"),
        (["--after", "12"], "--after: must be a cursor"),
        (["--after", "1.2; DROP"], "--after: must be a cursor"),
        (["--since", EPOCH, "--format", "xml"], "invalid choice: 'xml'"),
        ([], "give --since TIME or --after CURSOR"),
        (["--since", EPOCH, "--page-size", "0"], "--page-size: must be between"),
        (["--since", EPOCH, "--syslog", "tcp://h:1"], "--syslog: must be udp://"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    done = run_cli(
        "audit",
        "export",
        *args,
        "--database",
        f"sqlite:///{tmp_path / 'none.db'}",
        cwd=tmp_path,
        env=ENV,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = error_lines(done.stderr)
    assert says in line
