"""`dispatch list` and `dispatch show` on every dialect: order, pages, filters, effective
status on both clocks, everything `show` gathers — and never a lease token, never a write."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from qinglong_dispatcher import api, bootstrap, ports
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import (
    digests,
    dispatch_views,
    errors,
    plan_previews,
    recovery,
    states,
)
from qinglong_dispatcher.domain.dispatch_views import ListQuery
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import faults, repositories, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.recovery import started_execution
from tests.support.stores import Harness

Status = EffectiveStatus
BUILT_IN_SHOWN = plan_previews.shown_by_type(builtin.PLAN_MODELS)
"""What `dispatch show` shows of each built-in action's plan."""


async def list_all(
    store: ports.Store,
    now_ms: int,
    *,
    status: EffectiveStatus | None = None,
    action_type: str | None = None,
    project_id: str | None = None,
) -> list[dispatch_views.DispatchSummary]:
    """Every page of a listing, followed through `next`."""
    rows: list[dispatch_views.DispatchSummary] = []
    after = None
    while True:
        request = ListQuery(
            status=status, action_type=action_type, project_id=project_id, limit=2, after=after
        )
        page = await store.list_dispatches(request, now_ms=now_ms)
        rows.extend(page.dispatches)
        if page.next is None:
            return rows
        after = page.next


async def tokens(h: Harness) -> set[str]:
    """Every lease token the database holds (rows, ledger and resolutions)."""
    found: set[str] = set()
    for table in ("approved_action_dispatch_executions", "execution_events"):
        rows = await h.raw(f"SELECT lease_token FROM {faults.table(h, table)}")
        found.update(r["lease_token"] for r in rows if r["lease_token"])
    return found


def assert_no_token(text: str, held: set[str]) -> None:
    assert held, "the test should have leased something"
    for token in held:
        assert token not in text


# -- list ---------------------------------------------------------------------------------


async def test_list_is_newest_first_and_pages_have_no_gaps_or_duplicates(
    harness: Harness, clock: ManualClock
) -> None:
    # Three batches: rows of one batch share created_at_ms, so the id breaks the tie.
    for size in (3, 4, 3):
        await submit_runs(harness.approver_store, clock, size)
        clock.advance(ms=10)
    table = faults.table(harness, "approved_action_dispatches")
    rows = await harness.raw(f"SELECT dispatch_id, created_at_ms FROM {table}")
    expected = [
        r["dispatch_id"]
        for r in sorted(rows, key=lambda r: (r["created_at_ms"], r["dispatch_id"]), reverse=True)
    ]
    assert len(expected) == 10
    for limit, sizes in ((3, [3, 3, 3, 1]), (5, [5, 5]), (10, [10]), (1, [1] * 10)):
        seen: list[str] = []
        pages: list[int] = []
        after = None
        while True:
            page = await harness.store.list_dispatches(
                ListQuery(limit=limit, after=after), now_ms=clock.now_ms()
            )
            seen.extend(d.dispatch_id for d in page.dispatches)
            pages.append(len(page.dispatches))
            if page.next is None:
                break
            assert page.next == page.dispatches[-1].cursor
            after = dispatch_views.Cursor.parse(str(page.next))  # the printed form round-trips
        assert (seen, pages) == (expected, sizes), limit
    # A cursor need not name an existing row: one in the future starts at the newest, one
    # before the oldest row gives an empty last page.
    future = dispatch_views.Cursor.parse(f"{2**50}:d-zzz")
    page = await harness.store.list_dispatches(ListQuery(after=future), now_ms=clock.now_ms())
    assert [d.dispatch_id for d in page.dispatches] == expected
    oldest = await harness.store.list_dispatches(
        ListQuery(after=dispatch_views.Cursor(created_at_ms=0, dispatch_id="d-0")),
        now_ms=clock.now_ms(),
    )
    assert (oldest.dispatches, oldest.next) == ((), None)


@pytest.mark.parametrize("limit", [0, -1, dispatch_views.MAX_LIMIT + 1])
def test_the_limit_is_bounded(limit: int) -> None:
    with pytest.raises(errors.InvalidInput, match="limit"):
        ListQuery(limit=limit)
    assert ListQuery().limit == dispatch_views.DEFAULT_LIMIT == 50
    assert ListQuery(limit=dispatch_views.MAX_LIMIT).limit == 500


async def test_list_filters_by_effective_status_action_and_project(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    await submit_runs(harness.approver_store, clock, 1, project="p-rr")
    expired, _ = await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)  # its lease is over: recovery_required
    await submit_runs(harness.approver_store, clock, 1, project="p-live")
    live, _ = await started_execution(harness, clock)
    (leased,) = await submit_runs(harness.approver_store, clock, 1, project="p-leased")
    claimed = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner="w2", limit=1, lease_ms=LEASE_MS
    )
    assert [c.dispatch_id for c in claimed.claimed] == [leased.dispatch_id]
    done = await submit_runs(harness.approver_store, clock, 2, project="p-done")
    assert (await make_dispatcher(harness.store, clock).dispatch_batch()).outcomes == {
        "succeeded": 2
    }
    (pending,) = await submit_runs(harness.approver_store, clock, 1, project="p-pending")
    (cancelled,) = await submit_runs(harness.approver_store, clock, 1, project="p-cancelled")
    await api.cancel_dispatch(
        harness.operator_store, clock, cancelled.dispatch_id, operator="op", reason="changed_mind"
    )
    now = clock.now_ms()

    everything = {d.dispatch_id: d for d in await list_all(harness.store, now)}
    assert {i: d.status for i, d in everything.items()} == {
        expired.dispatch_id: Status.RECOVERY_REQUIRED,
        live.dispatch_id: Status.EXECUTING,
        leased.dispatch_id: Status.LEASED,
        done[0].dispatch_id: Status.SUCCEEDED,
        done[1].dispatch_id: Status.SUCCEEDED,
        pending.dispatch_id: Status.PENDING,
        cancelled.dispatch_id: Status.CANCELLED,
    }
    by_status = {
        status: {d.dispatch_id for d in await list_all(harness.store, now, status=status)}
        for status in EffectiveStatus
    }
    assert by_status == {
        Status.RECOVERY_REQUIRED: {expired.dispatch_id},
        Status.EXECUTING: {live.dispatch_id},
        Status.LEASED: {leased.dispatch_id},
        Status.SUCCEEDED: {d.dispatch_id for d in done},
        Status.PENDING: {pending.dispatch_id},
        Status.RETRY_WAIT: set(),
        Status.FAILED: set(),
        Status.BLOCKED: set(),
        Status.CANCELLED: {cancelled.dispatch_id},
    }
    p_done = await list_all(harness.store, now, project_id="p-done")
    assert {d.dispatch_id for d in p_done} == {d.dispatch_id for d in done}
    assert {(d.attempt, d.max_attempts, d.result_code) for d in p_done} == {(1, 5, "run_created")}
    assert await list_all(harness.store, now, project_id="p-done", status=Status.PENDING) == []
    assert len(await list_all(harness.store, now, action_type="run.create")) == 7
    assert await list_all(harness.store, now, action_type="tool.invoke") == []
    # The counts `status` prints agree with the listing's effective statuses.
    counts = await harness.store.counts(now_ms=now)
    assert {s: n for s, n in counts.executions.items() if n} == {
        Status.RECOVERY_REQUIRED: 1,
        Status.EXECUTING: 1,
        Status.LEASED: 1,
        Status.SUCCEEDED: 2,
        Status.PENDING: 1,
        Status.CANCELLED: 1,
    }
    assert_no_token(json.dumps([d.as_dict() for d in everything.values()]), await tokens(harness))


async def test_a_caller_clock_ahead_of_the_database_never_lists_recovery_required(
    harness: Harness,
) -> None:
    # Started now in real time: only a caller whose clock runs a minute ahead sees it expired.
    clock = ManualClock(int(time.time() * 1000))
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock)
    ahead = clock.now_ms() + 2 * LEASE_MS
    (row,) = await list_all(harness.store, ahead)
    assert row.status is Status.EXECUTING
    assert await list_all(harness.store, ahead, status=Status.RECOVERY_REQUIRED) == []
    assert [
        d.dispatch_id for d in await list_all(harness.store, ahead, status=Status.EXECUTING)
    ] == [one.dispatch_id]
    detail = await harness.store.show_dispatch(one.dispatch_id, now_ms=ahead)
    assert detail is not None
    assert detail.execution.effective_status is Status.EXECUTING


# -- show ---------------------------------------------------------------------------------


async def test_show_a_succeeded_run_create(harness: Harness, clock: ManualClock) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await make_dispatcher(harness.store, clock).dispatch_batch()
    detail = await harness.store.show_dispatch(
        one.dispatch_id, now_ms=clock.now_ms(), shown=BUILT_IN_SHOWN
    )
    assert detail is not None
    run = await repositories.runs(harness.store).get_run_by_key("proj-1", one.dispatch_id)
    assert run is not None
    assert detail.receipt is not None
    assert detail.run_id == run.run_id == detail.receipt.resource_id
    assert (detail.dispatch.dispatch_id, detail.dispatch.approval_request_id) == (
        one.dispatch_id,
        one.approval_request_id,
    )
    assert detail.dispatch.approved_by == "approver"
    assert detail.plan is not None
    assert detail.plan_code is None
    assert {k: v for k, v in detail.plan.items() if k != "actionRef"} == {
        "schemaVersion": 1,
        "projectId": "proj-1",
        "taskId": "task-0",
        "taskRevision": 0,
        "executorType": "shell",
        "priority": 0,
        "taskName": None,
        "taskSnapshotRef": None,
        "inputRef": None,
    }
    e = detail.execution
    assert (e.status, e.effective_status, e.attempt, e.result_code) == (
        ExecutionStatus.SUCCEEDED,
        Status.SUCCEEDED,
        1,
        "run_created",
    )
    assert e.lease_owner == "w1"
    assert [(ev.from_status, ev.to_status) for ev in detail.events] == [
        (None, Status.PENDING),
        (ExecutionStatus.PENDING, Status.SUCCEEDED),  # a passage: one line names the path
    ]
    # Database times, from the ledger itself (the manual clock is years behind them).
    stored = await harness.store.execution_events(one.dispatch_id)
    assert [ev.committed_at_ms for ev in detail.events] == [ev.committed_at_ms for ev in stored]
    assert all(ev.committed_at_ms > clock.now_ms() for ev in detail.events)
    assert (detail.observation, detail.resolution, detail.audit, detail.step_run) == (
        None,
        None,
        (),
        None,
    )
    shown = json.dumps(detail.as_dict())
    assert_no_token(shown + repr(detail), await tokens(harness))
    # The operator login (cluster) reads the same.
    as_operator = await harness.operator_store.show_dispatch(
        one.dispatch_id, now_ms=clock.now_ms(), shown=BUILT_IN_SHOWN
    )
    assert as_operator is not None
    assert as_operator.as_dict() == detail.as_dict()


async def test_show_a_tool_invoke_with_its_step_run_and_without_its_content(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    sandbox = tmp_path / "tool-sandbox"
    sandbox.mkdir()
    run = await tools.live_run(harness, clock)
    content = "secret-ish note, ünïcode\n"
    submitted = await tools.submit_tool(harness, clock, run, content=content)
    dispatch_id = submitted.consumed.dispatch_id
    handlers = tools.tool_handlers(harness.store, clock, sandbox)
    report = await make_dispatcher(harness.store, clock, handlers=handlers).dispatch_batch()
    assert report.outcomes == {"succeeded": 1}
    detail = await harness.store.show_dispatch(
        dispatch_id, now_ms=clock.now_ms(), shown=BUILT_IN_SHOWN
    )
    assert detail is not None
    assert detail.step_run is not None
    assert (
        detail.step_run.step_run_id,
        detail.step_run.run_id,
        detail.step_run.status.value,
        detail.step_run.version,
        detail.step_run.result_code,
    ) == (submitted.step_run_id, run.run_id, "succeeded", 3, "file_written")
    assert detail.run_id == run.run_id
    assert detail.receipt is None
    assert detail.plan is not None
    assert {k: v for k, v in detail.plan.items() if k != "actionRef"} == {
        "schemaVersion": 1,
        "projectId": run.project_id,
        "runId": run.run_id,
        "stepRunId": submitted.step_run_id,
        "toolId": "builtin.file.write",
        "toolVersion": 1,
        "content": plan_previews.redacted(content, digests.PLAIN),
    }
    assert detail.execution.effective_status is Status.SUCCEEDED
    shown = json.dumps(detail.as_dict(), ensure_ascii=False)
    assert content.strip() not in shown
    assert_no_token(shown + repr(detail), await tokens(harness))
    listed = await list_all(harness.store, clock.now_ms(), action_type="tool.invoke")
    assert [d.dispatch_id for d in listed] == [dispatch_id]


async def test_show_recovery_observations_then_the_resolution(
    harness: Harness, clock: ManualClock
) -> None:
    (one,) = await submit_runs(harness.approver_store, clock, 1)
    await started_execution(harness, clock)
    clock.advance(ms=LEASE_MS)
    assert (await bootstrap.build_reconciler(harness.store, clock).reconcile_pass()).observed == 1
    detail = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert detail is not None
    assert (detail.execution.status, detail.execution.effective_status) == (
        ExecutionStatus.EXECUTING,
        Status.RECOVERY_REQUIRED,
    )
    assert detail.observation is not None
    assert (detail.observation.outcome, detail.observation.count) == (
        recovery.ObservationOutcome.MISSING,
        1,
    )
    assert (detail.resolution, detail.run_id, detail.receipt) == (None, None, None)

    await api.resolve_manually(
        harness.operator_store,
        clock,
        one.dispatch_id,
        resolution=states.Completion.FAILED,
        operator="oncall-1",
        reason="checked_downstream",
    )
    after = await harness.store.show_dispatch(one.dispatch_id, now_ms=clock.now_ms())
    assert after is not None
    assert after.execution.effective_status is Status.FAILED
    assert after.resolution is not None
    assert (
        after.resolution.source,
        after.resolution.resolution,
        after.resolution.resolved_by,
        after.resolution.reason_code,
    ) == (recovery.Source.MANUAL, states.Completion.FAILED, "oncall-1", "checked_downstream")
    assert [(a.kind, a.actor) for a in after.audit] == [
        (recovery.AUDIT_MANUAL_RESOLUTION, "oncall-1")
    ]
    assert (after.events[-1].from_status, after.events[-1].to_status) == (
        ExecutionStatus.EXECUTING,
        Status.FAILED,
    )
    assert after.observation is not None  # the last observation stays, as history
    held = await tokens(harness)
    held.update(
        r["lease_token"]
        for r in await harness.raw(
            f"SELECT lease_token FROM {faults.table(harness, 'recovery_resolutions')}"
        )
    )
    assert_no_token(json.dumps(after.as_dict()) + repr(after), held)


async def test_show_an_unknown_id_and_reads_write_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 3)
    before = harness.store.commits
    assert await harness.store.show_dispatch("d-unknown", now_ms=clock.now_ms()) is None
    assert len(await list_all(harness.store, clock.now_ms())) == 3
    assert await harness.store.dispatch_run_ids(["d-unknown"]) == {}
    assert harness.store.commits == before


async def test_run_ids_for_submit_once_the_run_exists(harness: Harness, clock: ManualClock) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 3)
    ids = [c.dispatch_id for c in consumed]
    # Read by the login that submits (on the cluster: an approver, which reads Runs only).
    assert await harness.approver_store.dispatch_run_ids(ids) == {}
    await make_dispatcher(harness.store, clock).dispatch_batch()
    found = await harness.approver_store.dispatch_run_ids(ids)
    for dispatch_id in ids:
        run = await repositories.runs(harness.store).get_run_by_key("proj-1", dispatch_id)
        assert run is not None
        assert found[dispatch_id] == run.run_id
