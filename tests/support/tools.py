"""Tool steps for tests: a live Run, submitted tool steps, start commands, fact counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from qinglong_dispatcher import api, bootstrap, ports
from qinglong_dispatcher import api as tool_api
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke_plan
from qinglong_dispatcher.domain import digests, plans, records, runs
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.domain.tools import start as tool_start
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, repositories
from tests.support.actions import DEFAULT_TTL_MS, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.stores import Harness

FACT_TABLES = (
    "security_audit_events",
    "trace_anchors",
    "audit_receipts",
    "step_runs",
    "step_run_mutations",
    "run_events",
    "tool_execution_start_barriers",
)
"""Every table a start writes (and step_runs, which it updates)."""

POLICY = tool_registry.ToolPolicy(sandbox_root="/srv/qinglong/tool-sandbox")


async def live_run(h: Harness, clock: ManualClock, project: str = "proj-1") -> runs.Run:
    """A queued Run created through `run.create`."""
    (consumed,) = await submit_runs(h.approver_store, clock, 1, project=project)
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    run = await repositories.runs(h.store).get_run_by_key(project, consumed.dispatch_id)
    assert run is not None
    return run


async def submit_tool(
    h: Harness, clock: ManualClock, run: runs.Run, content: str = "hello, sandbox\n"
) -> tool_api.ToolSubmission:
    """A `builtin.file.write` step waiting for its (approved and consumed) approval."""
    return await tool_api.submit_tool_invocation(
        h.approver_store,
        repositories.steps(h.approver_store),
        clock,
        api.Policy(approval_ttl_ms=DEFAULT_TTL_MS, max_attempts=5),
        project_id=run.project_id,
        run_id=run.run_id,
        tool_id=tool_registry.TOOL_FILE_WRITE,
        content=content,
        requested_by="tester",
        approved_by="approver",
    )


@dataclasses.dataclass
class Started:
    """A claimed and started `tool.invoke` execution whose execute has not run."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity
    plan: tool_invoke_plan.ToolInvocationPlan
    step: steps.StepRun

    def command(
        self, *, key: str | None = None, policy: tool_registry.ToolPolicy = POLICY
    ) -> tool_start.StartCommand:
        """The start command the action would build (identities from `key`, default dispatch)."""
        return tool_invocations.build_command(
            ids=tool_invocations.ids_for(key or self.dispatch.dispatch_id),
            plan=self.plan,
            step=self.step,
            policy=policy,
            profile="edge",
            actor=self.dispatch.approved_by,
            dispatch=self.dispatch,
            plan_digests=digests.PLAIN,
        )


async def started_tool(
    h: Harness, clock: ManualClock, run: runs.Run, content: str = "hello, sandbox\n"
) -> Started:
    """Submit one tool step, then claim and start its execution (nothing executed)."""
    submitted = await submit_tool(h, clock, run, content)
    batch = await h.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=LEASE_MS)
    (claim,) = batch.claimed
    assert claim.lease is not None
    assert claim.dispatch is not None
    assert claim.dispatch.dispatch_id == submitted.consumed.dispatch_id
    (result,) = await h.store.start(
        [
            records.StartRequest(
                lease=claim.lease,
                approval_request_id=claim.dispatch.approval_request_id,
                action_digest=claim.dispatch.action_digest,
            )
        ],
        now_ms=clock.now_ms(),
        lease_ms=LEASE_MS,
    )
    assert result.identity is not None
    stored = await h.store.get_plan(claim.dispatch.project_id, claim.dispatch.action_ref)
    assert stored is not None
    plan = plans.parse_plan("tool.invoke", stored.plan_json.encode(), models=builtin.PLAN_MODELS)
    assert isinstance(plan, tool_invoke_plan.ToolInvocationPlan)
    step = await repositories.steps(h.store).get_step_run(submitted.step_run_id)
    assert step is not None
    return Started(dispatch=claim.dispatch, identity=result.identity, plan=plan, step=step)


async def fact_counts(h: Harness) -> dict[str, int]:
    """Rows per table a start writes."""
    return {
        name: int(await h.scalar(f"SELECT count(*) AS n FROM {faults.table(h, name)}"))
        for name in FACT_TABLES
    }


async def positions(h: Harness, run_id: str, step_run_id: str) -> tuple[Any, ...]:
    """(run version, run event_seq, step status, step version)."""
    run = (
        await h.raw(
            f"SELECT version, event_seq FROM {faults.table(h, 'runs')} WHERE run_id = '{run_id}'"
        )
    )[0]
    step = (
        await h.raw(
            f"SELECT status, version FROM {faults.table(h, 'step_runs')} "
            f"WHERE step_run_id = '{step_run_id}'"
        )
    )[0]
    return (run["version"], run["event_seq"], step["status"], step["version"])


def tool_handlers(
    store: ports.Store, clock: ports.Clock, sandbox_dir: Path
) -> dict[str, ports.ApprovedActionHandler]:
    """The built-in actions with `tool.invoke` registered on `sandbox_dir`."""
    return bootstrap.handlers(store, clock, tool_sandbox_dir=sandbox_dir)


async def fail_updates_of(h: Harness, table: str) -> None:
    """Every UPDATE of `table` aborts from now on (a real failing write)."""
    if h.dialect == "sqlite":
        await h.raw(
            f"CREATE TRIGGER test_fail_update_{table} BEFORE UPDATE ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        return
    await h.raw(
        "CREATE OR REPLACE FUNCTION qinglong.test_fail() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
    )
    await h.raw(
        f"CREATE TRIGGER test_fail_update_{table} BEFORE UPDATE ON qinglong.{table} "
        "FOR EACH ROW EXECUTE FUNCTION qinglong.test_fail()"
    )


async def tamper(h: Harness, table: str, assignment: str, where: str) -> None:
    """Change an immutable row by hand, as an attacker with file or superuser access could."""
    if h.dialect == "sqlite":
        await h.raw(f"DROP TRIGGER {table}_immutable_update")
        await h.raw(f"UPDATE {table} SET {assignment} WHERE {where}")
        return
    await h.raw(f"ALTER TABLE qinglong.{table} DISABLE TRIGGER {table}_immutable")
    await h.raw(f"UPDATE qinglong.{table} SET {assignment} WHERE {where}")
    await h.raw(f"ALTER TABLE qinglong.{table} ENABLE TRIGGER {table}_immutable")
