"""The real console script on the cluster profile against a fresh PostgreSQL database."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import asyncpg
import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import errors, records, states
from tests.support import stores
from tests.support.actions import submit_runs_as_approver
from tests.support.cli import SCRIPT, json_out, run_cli
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

TASKS = 20


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database(migrated=False) as name:
        yield name


SUITE = {"QINGLONG_INSTALLATION": stores.INSTALLATION}
"""A new database of the suite is of its (legacy) installation, whose roles the logins hold."""


def _cluster(url: str, *args: str) -> list[str]:
    return [*args, "--profile", "cluster", "--database", url]


def _migrate(admin: str, runtime: str, cwd: Path) -> None:
    pending = run_cli(*_cluster(runtime, "migrate", "--check"), cwd=cwd)
    assert pending.returncode == 1, pending.stderr
    migrated = run_cli(*_cluster(admin, "migrate"), cwd=cwd, env=SUITE)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied" in migrated.stdout
    again = run_cli(*_cluster(admin, "migrate"), cwd=cwd, env=SUITE)
    assert (again.returncode, again.stdout.strip()) == (0, "schema is current")
    assert run_cli(*_cluster(runtime, "migrate", "--check"), cwd=cwd).returncode == 0


def _submit(approver: str, cwd: Path) -> set[str]:
    def one(i: int) -> str:
        args = ("submit", "run-create", "--project", "p", "--task", f"t{i}", "--revision", "1")
        out = json_out(run_cli(*_cluster(approver, *args, "--json"), cwd=cwd))
        return str(out["dispatch_id"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        return set(pool.map(one, range(TASKS)))


def _drain_from_two_processes(runtime: str, cwd: Path) -> list[Any]:
    """Two replicas drain at once; each is a process with its own pool and owner id."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    ticks = [
        subprocess.Popen(
            [str(SCRIPT), *_cluster(runtime, "tick", "--drain", "--json")],
            cwd=cwd,
            env={**clean, "QINGLONG_OWNER_ID": f"replica-{name}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    reports = []
    for tick in ticks:
        stdout, stderr = tick.communicate(timeout=60)
        reports.append(
            json_out(subprocess.CompletedProcess(tick.args, tick.returncode, stdout, stderr))
        )
    return reports


@pytest.mark.slow
async def test_migrate_submit_two_concurrent_drains_and_status(
    database: str, tmp_path: Path
) -> None:
    admin, runtime = stores.pg_url(database), stores.runtime_url(database)
    await anyio.to_thread.run_sync(_migrate, admin, runtime, tmp_path)
    # `submit` approves its own requests: a login in qinglong_approver and qinglong_self_approver.
    ids = await anyio.to_thread.run_sync(_submit, stores.approver_url(database), tmp_path)
    assert len(ids) == TASKS

    reports = await anyio.to_thread.run_sync(_drain_from_two_processes, runtime, tmp_path)
    assert sum(r["outcomes"].get("succeeded", 0) for r in reports) == TASKS

    status = json_out(
        await anyio.to_thread.run_sync(
            lambda: run_cli(*_cluster(runtime, "status", "--json"), cwd=tmp_path)
        )
    )
    assert status["profile"] == "cluster"
    assert status["executions"]["succeeded"] == TASKS
    assert status["runs"] == TASKS
    assert status["due"] == 0
    starts = await stores.raw(
        database,
        "SELECT dispatch_id, count(*) AS n FROM qinglong.execution_events "
        "WHERE (from_status, to_status) IN (('leased', 'executing'), ('pending', 'succeeded')) "
        "GROUP BY dispatch_id",
    )
    assert sorted(r["dispatch_id"] for r in starts) == sorted(ids)
    assert {r["n"] for r in starts} == {1}


# -- manual resolution: the database checks the login (docs/operations.md) ------------------------


def _resolve_args(url: str, dispatch_id: str) -> list[str]:
    return _cluster(
        url,
        "recovery",
        "resolve",
        dispatch_id,
        "--as",
        "failed",
        "--operator",
        "oncall-1",
        "--reason",
        "checked_downstream",
    )


async def _start_one(store: ports.Store, clock: ManualClock) -> None:
    """Claim and start the next due execution without executing it (a dispatcher that died)."""
    batch = await store.claim_due(now_ms=clock.now_ms(), owner="dead", limit=1, lease_ms=1000)
    (claim,) = batch.claimed
    assert claim.lease is not None
    assert claim.dispatch is not None
    request = records.StartRequest(
        lease=claim.lease,
        approval_request_id=claim.dispatch.approval_request_id,
        action_digest=claim.dispatch.action_digest,
    )
    (started,) = await store.start([request], now_ms=clock.now_ms(), lease_ms=1000)
    assert started.identity is not None


async def _bookkeeping(database: str, dispatch_id: str) -> dict[str, Any]:
    (row,) = await stores.raw(
        database,
        "SELECT e.status, e.version, "
        "(SELECT count(*) FROM qinglong.recovery_resolutions r "
        f" WHERE r.dispatch_id = '{dispatch_id}') AS resolutions, "
        "(SELECT count(*) FROM qinglong.security_audit_events a "
        f" WHERE a.subject_id = '{dispatch_id}') AS audits, "
        "(SELECT count(*) FROM qinglong.execution_events v "
        f" WHERE v.dispatch_id = '{dispatch_id}') AS events "
        "FROM qinglong.approved_action_dispatch_executions e "
        f"WHERE e.dispatch_id = '{dispatch_id}'",
    )
    return row


@pytest.mark.slow
async def test_the_database_refuses_a_manual_resolution_from_the_runtime_login(
    tmp_path: Path,
) -> None:
    # Recovery_required in real time too: the lease expired a minute before the CLI runs.
    clock = ManualClock(int(time.time() * 1000) - 60_000)
    async with stores.fresh_database() as database:
        runtime = await stores.open_postgres(stores.runtime_url(database), max_size=2)
        try:
            (first,) = await submit_runs_as_approver(database, clock, 1)
            await _start_one(runtime, clock)
            clock.advance(ms=1000)
            before = await _bookkeeping(database, first.dispatch_id)
            assert before["status"] == "executing"
            with pytest.raises(errors.StoreError) as refused:
                await api.resolve_manually(
                    runtime,
                    clock,
                    first.dispatch_id,
                    resolution=states.Completion.FAILED,
                    operator="oncall-1",
                    reason="checked_downstream",
                )
            assert refused.value.code == "permission_denied"
            assert "qinglong_operator" in str(refused.value)
            # Nothing written: the execution change, its event and the audit row rolled back.
            assert await _bookkeeping(database, first.dispatch_id) == {
                **before,
                "resolutions": 0,
                "audits": 0,
            }
            # Nor can the runtime forge another login as the principal of an evidence row.
            forged = await stores.raw(
                database,
                f"SELECT attempt, lease_owner, lease_token, started_at_ms, version "
                f"FROM qinglong.approved_action_dispatch_executions "
                f"WHERE dispatch_id = '{first.dispatch_id}'",
            )
            conn = await asyncpg.connect(stores.runtime_url(database), timeout=5)
            try:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(
                        "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, "
                        "resolution, evidence_digest, resolved_by, principal, reason_code, "
                        "execution_attempt, execution_version, lease_owner, lease_token, "
                        "started_at_ms, committed_at_ms) VALUES "
                        "($1, 'evidence', 'succeeded', repeat('a', 64), 'reconciler', $2, "
                        "'x', $3, $4, $5, $6, $7, 0)",
                        first.dispatch_id,
                        stores.OPERATOR_LOGIN,
                        forged[0]["attempt"],
                        forged[0]["version"],
                        forged[0]["lease_owner"],
                        forged[0]["lease_token"],
                        forged[0]["started_at_ms"],
                    )
            finally:
                await conn.close()
        finally:
            await runtime.close()

        # The same through the CLI: the runtime URL is refused in one line, exit 1 …
        as_runtime = await anyio.to_thread.run_sync(
            lambda: run_cli(
                *_resolve_args(stores.runtime_url(database), first.dispatch_id), cwd=tmp_path
            )
        )
        assert as_runtime.returncode == 1, as_runtime.stderr
        assert len(as_runtime.stderr.strip().splitlines()) == 1, as_runtime.stderr
        assert "Traceback" not in as_runtime.stderr
        assert "qinglong_operator" in as_runtime.stderr
        assert (await _bookkeeping(database, first.dispatch_id))["resolutions"] == 0

        # … and the operator login succeeds, with its own name as the principal.
        as_operator = await anyio.to_thread.run_sync(
            lambda: run_cli(
                *_resolve_args(stores.operator_url(database), first.dispatch_id), cwd=tmp_path
            )
        )
        assert as_operator.returncode == 0, as_operator.stderr
        resolutions = await stores.raw(
            database,
            "SELECT source, resolved_by, principal FROM qinglong.recovery_resolutions",
        )
        assert [tuple(r.values()) for r in resolutions] == [
            ("manual", "oncall-1", stores.OPERATOR_LOGIN)
        ]
        audits = await stores.raw(
            database,
            "SELECT actor, principal FROM qinglong.security_audit_events "
            "WHERE kind = 'recovery.manual_resolution'",
        )
        assert [tuple(r.values()) for r in audits] == [("oncall-1", stores.OPERATOR_LOGIN)]
        after = await _bookkeeping(database, first.dispatch_id)
        assert (after["status"], after["events"]) == ("failed", before["events"] + 1)


@pytest.mark.slow
def test_connection_errors_name_the_server_and_its_reason_never_the_password(
    tmp_path: Path,
) -> None:
    """One line naming host, port and database and why (the server's own message)."""
    admin = urllib.parse.urlsplit(stores.admin_dsn())
    hosts = admin.netloc.rpartition("@")[2]
    missing = admin._replace(path="/qinglong_no_such_db").geturl()
    result = run_cli(*_cluster(missing, "status"), cwd=tmp_path)
    assert result.returncode == 69, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"PostgreSQL at {hosts}/qinglong_no_such_db cannot be used: " in result.stderr
    assert "qinglong_no_such_db" in result.stderr.rpartition("cannot be used: ")[2]
    closed = run_cli(*_cluster("postgresql://u:s3cret-pw@127.0.0.1:1/db", "status"), cwd=tmp_path)
    assert closed.returncode == 69, closed.stderr
    assert len(closed.stderr.strip().splitlines()) == 1
    assert "PostgreSQL at 127.0.0.1:1/db cannot be used: Connect call failed" in closed.stderr
    assert "s3cret-pw" not in closed.stderr + closed.stdout


@pytest.mark.slow
async def test_migrate_warns_while_every_login_may_create_temporary_objects(
    database: str, tmp_path: Path
) -> None:
    admin = stores.pg_url(database)
    # A new database grants TEMP to PUBLIC: the first step of the temporary-domain attack.
    warned = run_cli(*_cluster(admin, "migrate"), cwd=tmp_path, env=SUITE)
    assert warned.returncode == 0, warned.stderr
    lines = [line for line in warned.stderr.splitlines() if "warning:" in line]
    assert len(lines) == 1
    assert "REVOKE TEMP ON DATABASE <db> FROM PUBLIC" in lines[0]
    await stores.raw(database, f"REVOKE TEMP, CREATE ON DATABASE {database} FROM PUBLIC")
    quiet = run_cli(*_cluster(admin, "migrate"), cwd=tmp_path, env=SUITE)
    assert (quiet.returncode, quiet.stdout.strip()) == (0, "schema is current")
    assert "warning:" not in quiet.stderr
