"""Primary loss on PostgreSQL with a synchronous standby, two generations.

A primary and a synchronous standby (`synchronous_commit=remote_apply`) are built on this
machine (`tests.support.pg_ha`). Four real `run` daemons, all given one multi-host URL with
`target_session_attrs=read-write`, drain the dispatches; once part of them have succeeded the
primary is stopped with `pg_ctl stop -m immediate` and the standby promoted. The daemons find
the new primary by themselves and finish. Then, on the new primary: no dispatch started twice
(one `leased → executing` per dispatch, one Run each); every start, effect and completion a
daemon logged as committed is there; every dispatch succeeded or was settled by evidence, and
one left to an operator only if its effect provably never committed. The old primary is then
rewound (`pg_rewind`), rejoins as the synchronous standby, and a second generation fails
back over to it and passes the same checks.

Slow (≈ 50–70 s here): 2,000 dispatches a generation, two generations. A longer run:
`QINGLONG_FAILOVER_DISPATCHES=20000 QINGLONG_FAILOVER_GENERATIONS=4` (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from qinglong_dispatcher import clock
from tests.support import pg_ha, stores
from tests.support.actions import submit_runs
from tests.support.cli import json_out, run_cli
from tests.support.daemon import Daemon, free_port, log_events, ready, running, wait_until

DISPATCHES = int(os.environ.get("QINGLONG_FAILOVER_DISPATCHES") or 2_000)
GENERATIONS = int(os.environ.get("QINGLONG_FAILOVER_GENERATIONS") or 2)
"""Failovers, each to the node the previous one left behind (rewound, rejoined)."""

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300 + GENERATIONS * DISPATCHES // 20),
]
REPLICAS = 4
FAIL_AT = 0.3
"""The primary is lost once this share of the generation's dispatches has succeeded."""
STALL_SECONDS = 0.5
LEASE_SECONDS = 4.0
SETTLE_SECONDS = 60 + DISPATCHES / 50
"""How long the drain may take after the failover (four replicas do ≈ 200 a second here)."""
UNFINISHED = ("pending", "leased", "retry_wait")


def _env(url: str, owner: str, port: int = 0) -> dict[str, str]:
    return {
        "QINGLONG_PROFILE": "cluster",
        "QINGLONG_DATABASE_URL": url,
        "QINGLONG_OWNER_ID": owner,
        # At most one page of 16 per replica per 0.25 s tick (≤ 256/s for four): the drain
        # lasts long enough for the primary to be lost in the middle of it.
        "QINGLONG_CADENCE_SECONDS": "0.25",
        "QINGLONG_PAGE_SIZE": "16",
        "QINGLONG_PASSAGE_PAGE_SIZE": "16",
        "QINGLONG_MAX_PAGES_PER_TICK": "1",
        "QINGLONG_RECONCILE_SECONDS": "1",
        "QINGLONG_LEASE_SECONDS": str(LEASE_SECONDS),
        "QINGLONG_METRICS_HOST": "127.0.0.1",
        "QINGLONG_METRICS_PORT": str(port or free_port()),
    }


@contextlib.contextmanager
def _replicas(cwd: Path, url: str, generation: int) -> Iterator[tuple[list[Daemon], list[int]]]:
    """The replica daemons and their listener ports; killed if the test did not stop them."""
    ports = [free_port() for _ in range(REPLICAS)]
    with contextlib.ExitStack() as stack:
        names = [f"gen{generation}-r{i}" for i in range(REPLICAS)]
        yield (
            [
                stack.enter_context(running(cwd, _env(url, name, port), name=name))
                for name, port in zip(names, ports, strict=True)
            ],
            ports,
        )


def _all_ready(ports: list[int]) -> None:
    # A daemon that cannot open its store at start exits 69 by design: the failover must
    # find every replica running.
    for port in ports:
        wait_until(functools.partial(ready, port), timeout=60)


async def _ledger(cluster: pg_ha.Cluster, sql: str) -> list[dict[str, Any]]:
    """SQL on whichever node is the primary now."""
    return await cluster.admin(cluster.primary, sql, database=pg_ha.DATABASE)


async def _count(cluster: pg_ha.Cluster, project: str, where: str) -> int:
    rows = await _ledger(
        cluster,
        "SELECT count(*) AS n FROM qinglong.approved_action_dispatch_executions "
        f"WHERE project_id = '{project}' AND {where}",
    )
    return int(rows[0]["n"])


async def _wait_for(
    what: str, predicate: Callable[[], Awaitable[bool]], seconds: float, cluster: pg_ha.Cluster
) -> None:
    with anyio.move_on_after(seconds):
        while True:
            if await predicate():
                return
            await anyio.sleep(0.05)
    raise AssertionError(f"{what} not reached in {seconds:g}s\n{cluster.log_tail()}")


async def _generation(cluster: pg_ha.Cluster, cwd: Path, generation: int) -> dict[str, Any]:
    """Submit, drain across one primary loss, and return what the daemons logged."""

    project = f"gen-{generation}"
    approver = await stores.open_postgres(cluster.url(pg_ha.APPROVER_LOGIN), max_size=2)
    try:
        await submit_runs(approver, clock.SystemClock(), DISPATCHES, project=project)
    finally:
        await approver.close()
    succeeded = "status = 'succeeded'"
    with _replicas(cwd, cluster.url(pg_ha.RUNTIME_LOGIN), generation) as (daemons, ports):
        began = time.monotonic()
        await anyio.to_thread.run_sync(_all_ready, ports)

        async def far_enough() -> bool:
            return await _count(cluster, project, succeeded) >= DISPATCHES * FAIL_AT

        await _wait_for("the failover point", far_enough, SETTLE_SECONDS, cluster)
        before = await _count(cluster, project, succeeded)
        # The standby lags for a moment first, so that a commit the primary acknowledged
        # without its standby would be missing below (remote_apply makes the commits wait).
        await cluster.failover(stall_standby_s=STALL_SECONDS)
        failed_over = time.monotonic()
        failed_over_ms = clock.SystemClock().now_ms()

        async def drained() -> bool:
            # Nothing waiting or held, and nothing executing under a live lease: what is left
            # executing is recovery_required, which the daemons' reconcile passes settle.
            open_rows = await _count(
                cluster,
                project,
                f"(status IN {UNFINISHED} OR (status = 'executing' AND lease_expires_at_ms > "
                "(extract(epoch FROM clock_timestamp()) * 1000)::bigint))",
            )
            return open_rows == 0

        await _wait_for("the drain after the failover", drained, SETTLE_SECONDS, cluster)
        # A few reconcile passes for whatever became recovery_required last.
        with anyio.move_on_after(4 * LEASE_SECONDS):
            while True:
                if not await _count(cluster, project, "status = 'executing'"):
                    break
                await anyio.sleep(0.2)
        drained_at = time.monotonic()
        for daemon in daemons:
            assert daemon.poll() is None, daemon.stderr[-3000:]
            daemon.send_signal(signal.SIGTERM)
        codes = [daemon.wait(timeout=60) for daemon in daemons]
        logs = [daemon.stderr for daemon in daemons]
    assert codes == [0] * REPLICAS, [log[-2000:] for log in logs]
    # One reconcile pass of the operator's `tick`, as a fresh process on the multi-host URL.
    tick_env = _env(cluster.url(pg_ha.RUNTIME_LOGIN), "tick")
    ticked = json_out(run_cli("tick", "--once", "--json", cwd=cwd, env=tick_env))
    # Each event tagged with the replica (lease owner) that logged it.
    events = [
        {**event, "_owner": f"gen{generation}-r{i}"}
        for i, stderr in enumerate(logs)
        for event in log_events(stderr)
    ]
    return {
        "project": project,
        "events": events,
        "before": before,
        "failed_over_ms": failed_over_ms,
        "drain_s": drained_at - began,
        "after_failover_s": drained_at - failed_over,
        "tick": ticked,
    }


async def _check(cluster: pg_ha.Cluster, seen: dict[str, Any]) -> None:
    project, events = seen["project"], seen["events"]
    assert 0 < seen["before"] < DISPATCHES, "the primary was not lost mid-drain"
    # Every replica noticed the loss and went on, on the new primary, by itself.
    owners = await _ledger(
        cluster,
        "SELECT DISTINCT e.lease_owner FROM qinglong.execution_events AS e "
        "JOIN qinglong.approved_action_dispatch_executions AS x USING (dispatch_id) "
        f"WHERE x.project_id = '{project}' AND (e.to_status = 'executing' "
        "OR e.from_status = 'pending' AND e.to_status = 'succeeded') "
        f"AND e.committed_at_ms > {seen['failed_over_ms']}",
    )
    assert len(owners) == REPLICAS, owners
    noticed = [e for e in events if e.get("code") == "store_unavailable"]
    assert noticed, "no replica met the lost primary"
    rows = await _ledger(
        cluster,
        "SELECT x.dispatch_id, x.status, x.attempt, "
        "(SELECT count(*) FROM qinglong.execution_events AS e WHERE e.dispatch_id = x.dispatch_id "
        " AND (e.from_status, e.to_status) IN (('leased', 'executing'), ('pending', 'succeeded'))) "
        "AS starts, "
        "(SELECT count(*) FROM qinglong.runs AS r WHERE r.project_id = x.project_id "
        " AND r.idempotency_key = x.dispatch_id) AS runs, "
        "(SELECT count(*) FROM qinglong.approved_run_action_receipts AS c "
        " WHERE c.dispatch_id = x.dispatch_id) AS receipts, "
        "(SELECT source FROM qinglong.recovery_resolutions AS s "
        " WHERE s.dispatch_id = x.dispatch_id) AS resolved_by, "
        "(x.status = 'executing' AND x.lease_expires_at_ms <= "
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS recovery_required "
        "FROM qinglong.approved_action_dispatch_executions AS x "
        f"WHERE x.project_id = '{project}'",
    )
    ledger = {row["dispatch_id"]: row for row in rows}
    assert len(ledger) == DISPATCHES
    # Never started twice, never two Runs.
    assert {row["starts"] for row in rows} <= {0, 1}, [r for r in rows if r["starts"] > 1]
    assert {row["runs"] for row in rows} <= {0, 1}, [r for r in rows if r["runs"] > 1]
    history = await _ledger(
        cluster,
        "SELECT e.dispatch_id, e.attempt, e.to_status, e.lease_owner, e.committed_at_ms "
        "FROM qinglong.execution_events AS e "
        "JOIN qinglong.approved_action_dispatch_executions AS x USING (dispatch_id) "
        f"WHERE x.project_id = '{project}' AND e.to_status IN ('executing', 'succeeded')",
    )
    started = {
        (row["dispatch_id"], row["attempt"]): row
        for row in history
        if row["to_status"] == "executing"
    }
    succeeded = {row["dispatch_id"]: row for row in history if row["to_status"] == "succeeded"}

    def same_commit(row: dict[str, Any] | None, event: dict[str, Any]) -> None:
        """The ledger holds the very commit the replica logged: its owner's, from before the
        log line (a redo after the failover would match everything else, not this)."""
        assert row is not None, event
        logged_ms = datetime.datetime.fromisoformat(event["timestamp"]).timestamp() * 1000
        assert row["lease_owner"] == event["_owner"], (row, event)
        assert row["committed_at_ms"] <= logged_ms + 1, (row, event)

    # What the daemons logged as committed is on the new primary.
    finished: set[str] = set()
    """Dispatches a replica logged as finished: committed page items and completions."""
    for event in events:
        name = event["event"]
        if name == "dispatch.page_committed":
            for dispatch_id in event["dispatch_ids"]:
                row = ledger[dispatch_id]
                assert (row["status"], row["starts"], row["runs"], row["receipts"]) == (
                    "succeeded",
                    1,
                    1,
                    1,
                ), row
                same_commit(succeeded.get(dispatch_id), event)
                finished.add(dispatch_id)
        elif name == "dispatch.started":
            same_commit(started.get((event["dispatch_id"], event["attempt"])), event)
        elif name == "dispatch.completed" and event.get("outcome") == "succeeded":
            row = ledger[event["dispatch_id"]]
            assert (row["status"], row["runs"], row["receipts"]) == ("succeeded", 1, 1), row
            same_commit(succeeded.get(event["dispatch_id"]), event)
            finished.add(event["dispatch_id"])

    # Succeeded, or settled by evidence; an operator's only when the effect never committed.
    left_to_operator = []
    unacknowledged = 0
    for row in rows:
        if row["recovery_required"]:
            assert (row["runs"], row["receipts"]) == (0, 0), row
            left_to_operator.append(row["dispatch_id"])
            continue
        assert row["status"] == "succeeded", row
        assert (row["starts"], row["runs"], row["receipts"]) == (1, 1, 1), row
        # Finished by a replica that said so, settled by the reconciler's evidence, or
        # committed when the primary died before acknowledging it (the replica's replay
        # then found it done: `dispatch.start_refused`, never a second start).
        assert row["resolved_by"] in (None, "evidence"), row
        if row["dispatch_id"] in finished:
            assert row["resolved_by"] is None, row
        elif row["resolved_by"] is None:
            unacknowledged += 1
    seen["left_to_operator"] = len(left_to_operator)
    seen["by_evidence"] = sum(1 for row in rows if row["resolved_by"] == "evidence")
    seen["unacknowledged"] = unacknowledged
    seen["replayed"] = sum(1 for e in events if e["event"] == "dispatch.started")


async def test_the_primary_is_lost_twice_and_the_replicas_finish_on_the_new_one(
    tmp_path: Path,
) -> None:
    async with pg_ha.synchronous_pair() as cluster:
        report = []
        for generation in range(1, GENERATIONS + 1):
            if generation > 1:
                await cluster.rewind_and_rejoin()
            seen = await _generation(cluster, tmp_path, generation)
            await _check(cluster, seen)
            report.append(
                f"gen {generation}: {DISPATCHES} dispatches, lost at {seen['before']}, "
                f"drain {seen['drain_s']:.1f}s ({seen['after_failover_s']:.1f}s after), "
                f"per-item starts {seen['replayed']}, committed unacknowledged "
                f"{seen['unacknowledged']}, by evidence {seen['by_evidence']}, "
                f"to operator {seen['left_to_operator']}"
            )
        print("; ".join(report))  # reported, not asserted
