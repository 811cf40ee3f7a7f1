"""One batch of `run.create` and `tool.invoke` items: the `run.create` items are claimed,
started, take effect and complete in one passage (docs/decisions/0055); each `tool.invoke`
item is claimed and takes the per-item path (its own start barrier, the StepRun barrier, the
adapter, then its completion)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from qinglong_dispatcher.actions.tool_invoke import file_write
from qinglong_dispatcher.actions.tool_invoke import handler as tool_invoke
from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.domain.tools import steps
from tests.support import faults, repositories, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

RUN_CREATES = 3
TOOL_INVOKES = 2
COMMITS_PER_TOOL_ITEM = 3
"""The per-item path of a tool.invoke: start barrier, StepRun barrier (`prepare`), and the
StepRun result with the execution's completion (`complete_tool_step`)."""


@dataclasses.dataclass
class Seen:
    """What another connection saw committed while a tool item ran."""

    point: str
    dispatch_id: str
    tool_status: str
    tool_ledger: list[tuple[Any, Any]]
    tool_barriers: int
    run_create_statuses: list[str]
    file_exists: bool


async def test_a_page_of_run_create_and_tool_invoke_commits_each_kind_its_own_way(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    store = harness.store
    sandbox_dir = tmp_path / "tool-sandbox"
    sandbox_dir.mkdir()
    live = await tools.live_run(harness, clock)
    tool_items = [
        await tools.submit_tool(harness, clock, live, content=f"note {i}\n")
        for i in range(TOOL_INVOKES)
    ]
    run_creates = await submit_runs(harness.approver_store, clock, RUN_CREATES, project="proj-2")
    run_create_ids = [c.dispatch_id for c in run_creates]
    executions = faults.table(harness, "approved_action_dispatch_executions")
    events_table = faults.table(harness, "execution_events")
    barriers_table = faults.table(harness, "tool_execution_start_barriers")
    in_list = ", ".join(f"'{i}'" for i in run_create_ids)
    seen: list[Seen] = []

    async def observe(point: str, dispatch: records.Dispatch) -> None:
        """At the tool's own crash points, read what is committed (a separate connection)."""
        dispatch_id = dispatch.dispatch_id
        (tool_row,) = await harness.raw(
            f"SELECT status FROM {executions} WHERE dispatch_id = '{dispatch_id}'"
        )
        ledger = await harness.raw(
            f"SELECT from_status, to_status FROM {events_table} "
            f"WHERE dispatch_id = '{dispatch_id}' ORDER BY version"
        )
        others = await harness.raw(
            f"SELECT status FROM {executions} WHERE dispatch_id IN ({in_list})"
        )
        seen.append(
            Seen(
                point=point,
                dispatch_id=dispatch_id,
                tool_status=tool_row["status"],
                tool_ledger=[(r["from_status"], r["to_status"]) for r in ledger],
                tool_barriers=int(
                    await harness.scalar(
                        f"SELECT count(*) AS n FROM {barriers_table} "
                        f"WHERE dispatch_id = '{dispatch_id}'"
                    )
                ),
                run_create_statuses=sorted(r["status"] for r in others),
                file_exists=(sandbox_dir / dispatch.project_id / dispatch_id).exists(),
            )
        )

    handlers = tools.tool_handlers(store, clock, sandbox_dir)
    handlers[tool_invoke.ACTION_TYPE] = tool_invoke.ToolInvokeHandler(
        store,
        repositories.steps(store),
        clock,
        adapter=file_write.FileWriteAdapter(sandbox_dir),
        profile="edge",
        fault_hook=observe,
    )
    the_dispatcher = make_dispatcher(store, clock, handlers=handlers, page_size=16)

    commits_before = store.commits
    report = await the_dispatcher.dispatch_batch()
    commits = store.commits - commits_before

    assert report.claims["claimed"] == RUN_CREATES + TOOL_INVOKES, report  # a passage claims
    assert report.outcomes["succeeded"] == RUN_CREATES + TOOL_INVOKES, report
    # ONE passage for every run.create, one claim of the tool items, each its own three.
    assert commits == 1 + 1 + COMMITS_PER_TOOL_ITEM * TOOL_INVOKES

    # run.create: claim, start and completion in the same transaction, one ledger line.
    page_clocks = set()
    for dispatch_id in run_create_ids:
        events = await store.execution_events(dispatch_id)
        assert [(e.from_status, e.to_status) for e in events][1:] == [
            (ExecutionStatus.PENDING, ExecutionStatus.SUCCEEDED),
        ]
        page_clocks.add(events[1].committed_at_ms)
        row = await store.get_execution(dispatch_id)
        assert row is not None
        assert row.status is ExecutionStatus.SUCCEEDED
        assert await repositories.runs(store).get_run_by_key("proj-2", dispatch_id) is not None
        receipt = await repositories.runs(store).get_receipt(dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
    if harness.dialect == "postgres":  # transaction_timestamp(): the whole passage, one commit
        assert len(page_clocks) == 1

    # tool.invoke: the per-item path, its start committed before the tool ran.
    tool_ids = [t.consumed.dispatch_id for t in tool_items]
    assert sorted((s.dispatch_id, s.point) for s in seen) == sorted(
        (i, p) for i in tool_ids for p in ("after_barrier", "after_adapter")
    )
    started_ledger = [
        (None, "pending"),
        ("pending", "leased"),
        ("leased", "executing"),
    ]
    for s in seen:
        assert s.tool_status == "executing", s  # the start barrier had committed alone
        assert s.tool_ledger == started_ledger, s  # and its completion had not
        assert s.tool_barriers == 1, s  # the StepRun barrier too, before the adapter
        assert s.run_create_statuses == ["succeeded"] * RUN_CREATES, s  # the passage was done
        assert s.file_exists is (s.point == "after_adapter"), s
    for item in tool_items:
        dispatch_id = item.consumed.dispatch_id
        row = await store.get_execution(dispatch_id)
        assert row is not None
        assert (row.status, row.result_code) == (ExecutionStatus.SUCCEEDED, "file_written")
        events = await store.execution_events(dispatch_id)
        assert [e.to_status for e in events] == [
            ExecutionStatus.PENDING,
            ExecutionStatus.LEASED,
            ExecutionStatus.EXECUTING,
            ExecutionStatus.SUCCEEDED,
        ]
        assert min(page_clocks) <= events[2].committed_at_ms <= events[3].committed_at_ms
        step = await repositories.steps(store).get_step_run(item.step_run_id)
        assert step is not None
        assert step.status is steps.StepRunStatus.SUCCEEDED
        assert (
            await repositories.runs(store).get_receipt(dispatch_id) is None
        )  # no run.create receipt for it
    counts = await store.counts(now_ms=clock.now_ms())
    assert counts.step_runs["succeeded"] == TOOL_INVOKES
    assert counts.runs == 1 + RUN_CREATES
