"""Barriers per page for non-transactional actions: the ready items a page's workers carry at
the same time commit their start barriers in ONE transaction, and each one still executes
only after that commit (its own StepRun barrier, the adapter and its completion follow, each
completion fenced alone). With one worker nothing changes: each barrier commits alone
(`test_page_mixed_actions.py`)."""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.actions.tool_invoke import file_write
from qinglong_dispatcher.actions.tool_invoke import handler as tool_invoke
from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import faults, tools
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

TOOL_INVOKES = 3
COMMITS_PER_TOOL_ITEM_AFTER_START = 2
"""The StepRun barrier (`prepare`), then the StepRun result with the execution's completion."""


async def test_concurrent_items_commit_their_start_barriers_together(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    store = harness.store
    sandbox_dir = tmp_path / "tool-sandbox"
    sandbox_dir.mkdir()
    # One Run per tool step: no two steps move the same Run.
    lives = [await tools.live_run(harness, clock, project=f"proj-{i}") for i in range(TOOL_INVOKES)]
    items = [
        await tools.submit_tool(harness, clock, live, content=f"note {i}\n")
        for i, live in enumerate(lives)
    ]
    ids = sorted(item.consumed.dispatch_id for item in items)
    executions = faults.table(harness, "approved_action_dispatch_executions")
    in_list = ", ".join(f"'{i}'" for i in ids)
    seen: list[tuple[str, list[str]]] = []

    async def observe(point: str, dispatch: records.Dispatch) -> None:
        """Before any tool runs, what another connection sees committed for the page."""
        if point == "after_barrier":
            rows = await harness.raw(
                f"SELECT status FROM {executions} WHERE dispatch_id IN ({in_list})"
            )
            seen.append((dispatch.dispatch_id, sorted(r["status"] for r in rows)))

    handlers = tools.tool_handlers(store, clock, sandbox_dir)
    handlers[tool_invoke.ACTION_TYPE] = tool_invoke.ToolInvokeHandler(
        store,
        clock,
        adapter=file_write.FileWriteAdapter(sandbox_dir),
        profile="edge",
        fault_hook=observe,
    )
    the_dispatcher = make_dispatcher(
        store, clock, handlers=handlers, page_size=16, concurrency=TOOL_INVOKES
    )

    commits_before = store.commits
    report = await the_dispatcher.dispatch_batch()
    commits = store.commits - commits_before

    assert report.claims["claimed"] == TOOL_INVOKES, report
    assert report.outcomes["succeeded"] == TOOL_INVOKES, report
    # The claim, ONE transaction for the three start barriers, then each item's own two.
    assert commits == 1 + 1 + COMMITS_PER_TOOL_ITEM_AFTER_START * TOOL_INVOKES
    # Every tool ran after all three barriers had committed (and no completion yet).
    assert sorted(i for i, _ in seen) == ids
    for _, statuses in seen:
        assert statuses == ["executing"] * TOOL_INVOKES or "succeeded" in statuses
        assert "leased" not in statuses
    first_statuses = seen[0][1]
    assert first_statuses == ["executing"] * TOOL_INVOKES
    for dispatch_id in ids:
        events = await store.execution_events(dispatch_id)
        assert [e.to_status for e in events] == [
            ExecutionStatus.PENDING,
            ExecutionStatus.LEASED,
            ExecutionStatus.EXECUTING,
            ExecutionStatus.SUCCEEDED,
        ]
        row = await store.get_execution(dispatch_id)
        assert row is not None
        assert (row.status, row.result_code) == (ExecutionStatus.SUCCEEDED, "file_written")
    # The three barriers are one commit: on PostgreSQL one transaction's clock.
    starts = {(await store.execution_events(i))[2].committed_at_ms for i in ids}
    if harness.dialect == "postgres":
        assert len(starts) == 1
