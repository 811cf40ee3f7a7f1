"""Installed actions for the daemon-crash tests: a slow healthy one and a poison pill.

`test.slow` takes a while in `inspect` (so a daemon killed on a rhythm dies holding claims
before their barriers) and then succeeds; its evidence settles a kill after the barrier.
`test.poison` kills its own process with SIGKILL in `inspect`: whoever claims it dies.
A daemon loads them through a fake distribution's entry points (`write_distribution`); the
helpers below make an edge file of their dispatches and read it while daemons run.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import anyio

from qinglong_dispatcher import clock, ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.domain import digests, plans, records, recovery
from tests.support import daemon as daemons
from tests.support import stores
from tests.support.actions import make_api
from tests.support.installed_actions import write_distribution

SLOW_TYPE = "test.slow"
POISON_TYPE = "test.poison"
INSPECT_S = 0.15
HERE = "tests.support.crash_actions"


class SlowPlan(plans.PlanModel):
    ACTION_TYPE: ClassVar[str] = SLOW_TYPE


class PoisonPlan(plans.PlanModel):
    ACTION_TYPE: ClassVar[str] = POISON_TYPE


class SlowHandler:
    action_type = SLOW_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        _, digest = await self._plans.resolve(dispatch, SlowPlan)
        await anyio.sleep(INSPECT_S)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        await self._plans.approved(ctx.dispatch, SlowPlan)
        return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code="done")


class SlowEvidence:
    """Its execute has no effect to look for: a kill after the barrier settles as succeeded."""

    action_type = SLOW_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        await self._plans.approved(snapshot.dispatch, SlowPlan)
        return recovery.Evidence(
            kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                "qinglong/test.slow/evidence@v1", {"dispatchId": snapshot.dispatch.dispatch_id}
            ),
        )


class PoisonHandler:
    action_type = POISON_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process is gone")

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        raise AssertionError("a poison pill never reaches its barrier")


SLOW = contract.ActionSpec(
    action_type=SLOW_TYPE, plan_model=SlowPlan, handler=SlowHandler, evidence=SlowEvidence
)
POISON = contract.ActionSpec(
    action_type=POISON_TYPE,
    plan_model=PoisonPlan,
    handler=PoisonHandler,
    evidence=contract.MANUAL_ONLY,
)


def install(root: Path) -> Path:
    """Both actions as a distribution in `root` (put it on a daemon's PYTHONPATH)."""
    write_distribution(root, "qa-crash", {SLOW_TYPE: f"{HERE}:SLOW", POISON_TYPE: f"{HERE}:POISON"})
    return root


def plan(action_type: str, ref: str) -> plans.AnyPlan:
    """A plan of one of these actions."""
    model = SlowPlan if action_type == SLOW_TYPE else PoisonPlan
    return plans.parse_plan(
        action_type,
        {"schemaVersion": 1, "actionRef": ref, "projectId": "p1"},
        models={action_type: model},
    )


# -- an edge file and its daemons ----------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
READY_S = 30.0
"""How long a daemon may take to become ready, on a loaded machine."""


async def submit_to_file(path: Path, action_types: list[str], *, max_attempts: int) -> list[str]:
    """Approved dispatches of these types on a fresh edge file, due now by the system clock:
    their ids. Each is submitted a few milliseconds after the one before, so the due order
    (and so a page's order) is the order given."""
    system = clock.SystemClock()
    store = await stores.open_sqlite(path)
    ids = []
    try:
        await store.migrate(now_ms=system.now_ms())
        api = make_api(store, system, max_attempts=max_attempts)
        for i, action_type in enumerate(action_types):
            (consumed,) = await api.submit(
                [plan(action_type, f"act-{i}")], requested_by="tester", approved_by="approver"
            )
            ids.append(consumed.dispatch_id)
            await anyio.sleep(0.003)
    finally:
        await store.close()
    return ids


def daemon_env(path: Path, site: Path | None, port: int) -> dict[str, str]:
    """A quick edge daemon over `path`, with these actions installed when `site` is given."""
    return {
        "PYTHONPATH": f"{site}:{REPO}" if site is not None else str(REPO),
        "QINGLONG_PROFILE": "edge",
        "QINGLONG_DATABASE_URL": f"sqlite:///{path}",
        "QINGLONG_LEASE_SECONDS": str(LEASE_SECONDS),
        "QINGLONG_CADENCE_SECONDS": "0.2",
        "QINGLONG_RECONCILE_SECONDS": "1",
        "QINGLONG_RETENTION_DAYS": "0",
        "QINGLONG_METRICS_PORT": str(port),
        "QINGLONG_LOG_FORMAT": "json",
    }


def rows_sql(schema: str = "") -> str:
    """The query of `rows`, its tables in `schema` (`qinglong.` on PostgreSQL)."""
    return (
        "SELECT dispatch_id, status, attempt, takeovers, result_code, eligible_at_ms, "
        f"(SELECT count(*) FROM {schema}execution_events AS v "
        "WHERE v.dispatch_id = e.dispatch_id AND v.to_status = 'executing') AS starts "
        f"FROM {schema}approved_action_dispatch_executions AS e"
    )


def rows(path: Path) -> dict[str, dict[str, Any]]:
    """Every execution row with its count of starts, read on a connection of the test's own
    (WAL: never in a daemon's way)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    conn.row_factory = sqlite3.Row
    try:
        found = conn.execute(rows_sql()).fetchall()
        return {r["dispatch_id"]: dict(r) for r in found}
    finally:
        conn.close()


def settled(path: Path) -> bool:
    """Whether every execution is terminal."""
    return all(
        r["status"] in ("succeeded", "failed", "blocked", "cancelled") for r in rows(path).values()
    )


def leased_by(path: Path, owner: str) -> int:
    """How many rows `owner` holds a lease on before their barrier: once it is dead, what
    only a takeover can finish."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        ((count,),) = conn.execute(
            "SELECT count(*) FROM approved_action_dispatch_executions "
            "WHERE status = 'leased' AND lease_owner = ?",
            (owner,),
        ).fetchall()
        return int(count)
    finally:
        conn.close()


def unfinished(found: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(id, status, result_code, attempt, takeovers, starts) of every row that did not
    succeed after exactly one start: what a failed assertion shows."""
    keys = ("dispatch_id", "status", "result_code", "attempt", "takeovers", "starts")
    return [
        tuple(r[k] for k in keys)
        for r in found.values()
        if (r["status"], r["starts"]) != ("succeeded", 1)
    ]


def taken_over_from(logs: Path) -> set[str]:
    """The owners whose leases the daemons logging in `logs` took over."""
    return {
        event["previous_owner"]
        for log in logs.glob("*.log")
        for event in daemons.log_events(log.read_text(encoding="utf-8"))
        if event.get("event") == "lease.taken_over"
    }


async def until_ready(daemon: daemons.Daemon, port: int) -> None:
    """Wait for the daemon's `/readyz` (its store open and its listener up: it claims from
    its next tick), without blocking the event loop; fail with its log if it exits first."""
    with anyio.fail_after(READY_S):
        while not await anyio.to_thread.run_sync(daemons.ready, port):
            assert daemon.poll() is None, daemon.stderr
            await anyio.sleep(0.05)
