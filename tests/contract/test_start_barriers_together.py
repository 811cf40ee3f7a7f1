"""Barriers per page for non-transactional actions: the ready items a page's workers carry at
the same time commit their start barriers in ONE transaction (and those finishing together
their completions in one more), and each one still executes
only after that commit (its own StepRun barrier, the adapter and its completion follow, each
completion fenced alone). With one worker nothing changes: each barrier commits alone
(`test_page_mixed_actions.py`)."""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.actions.tool_invoke import file_write
from qinglong_dispatcher.actions.tool_invoke import handler as tool_invoke
from qinglong_dispatcher.domain import records
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import faults, repositories, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.handlers import RecordingHandler
from tests.support.stores import Harness

TOOL_INVOKES = 3
GROUP_WAIT_S = 5.0
"""Long enough that a loaded machine cannot split a group by timing: the tests count commits,
and a group commits as soon as every carried item has asked."""
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
        repositories.steps(store),
        clock,
        adapter=file_write.FileWriteAdapter(sandbox_dir),
        profile="edge",
        fault_hook=observe,
    )
    the_dispatcher = make_dispatcher(
        store,
        clock,
        handlers=handlers,
        page_size=16,
        concurrency=TOOL_INVOKES,
        group_wait_s=GROUP_WAIT_S,
    )

    commits_before = store.commits
    report = await the_dispatcher.dispatch_batch()
    commits = store.commits - commits_before

    assert report.claims["claimed"] == TOOL_INVOKES, report
    assert report.outcomes["succeeded"] == TOOL_INVOKES, report
    # A fresh dispatcher's passage of run.create (finding nothing, it is not tried again until
    # the claim takes such a row), the claim, ONE transaction for the three start barriers,
    # then each item's own two.
    assert commits == 1 + 1 + 1 + COMMITS_PER_TOOL_ITEM_AFTER_START * TOOL_INVOKES
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


# -- completions together ----------------------------------------------------------------------

ITEMS = 4


async def _fail_completion_of(harness: Harness, dispatch_id: str) -> None:
    """The completion of this one dispatch aborts its transaction (a real failing write)."""
    if harness.dialect == "sqlite":
        await harness.raw(
            "CREATE TRIGGER test_fail_one BEFORE UPDATE ON approved_action_dispatch_executions "
            f"WHEN NEW.dispatch_id = '{dispatch_id}' AND NEW.status = 'succeeded' "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        return
    await harness.raw(
        "CREATE OR REPLACE FUNCTION qinglong.test_fail_one() RETURNS trigger LANGUAGE plpgsql "
        f"AS $$ BEGIN IF NEW.dispatch_id = '{dispatch_id}' AND NEW.status = 'succeeded' THEN "
        "RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$"
    )
    await harness.raw(
        "CREATE TRIGGER test_fail_one BEFORE UPDATE "
        "ON qinglong.approved_action_dispatch_executions "
        "FOR EACH ROW EXECUTE FUNCTION qinglong.test_fail_one()"
    )


async def test_items_that_finish_together_commit_their_completions_together(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, ITEMS)
    handler = RecordingHandler()  # not transactional: the per-item path
    the_dispatcher = make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        concurrency=ITEMS,
        group_wait_s=GROUP_WAIT_S,
    )
    before = harness.store.commits
    report = await the_dispatcher.dispatch_batch()
    # The claim, the four start barriers in one transaction, the four completions in one.
    assert harness.store.commits - before == 3
    assert report.outcomes["succeeded"] == ITEMS
    for item in consumed:
        events = await harness.store.execution_events(item.dispatch_id)
        assert [e.to_status for e in events][-2:] == [
            ExecutionStatus.EXECUTING,
            ExecutionStatus.SUCCEEDED,
        ]
        assert [e.to_status for e in events].count(ExecutionStatus.EXECUTING) == 1


async def test_a_completion_that_fails_fails_alone(harness: Harness, clock: ManualClock) -> None:
    consumed = await submit_runs(harness.approver_store, clock, ITEMS)
    doomed = consumed[1].dispatch_id
    await _fail_completion_of(harness, doomed)
    handler = RecordingHandler()
    the_dispatcher = make_dispatcher(
        harness.store, clock, handlers={"run.create": handler}, concurrency=ITEMS
    )
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["succeeded"] == ITEMS - 1, report
    assert report.outcomes["completion_write_failed"] == 1, report
    for item in consumed:
        row = await harness.store.get_execution(item.dispatch_id)
        assert row is not None
        # The failed one stays executing (recovery_required once its lease ends), never rerun.
        expected = ExecutionStatus.EXECUTING if item.dispatch_id == doomed else "succeeded"
        assert row.status == expected, item.dispatch_id
    assert sorted(handler.executed) == sorted(c.dispatch_id for c in consumed)
