"""`dispatch_batch` with real stores and test-only handlers (docs/actions.md)."""

from __future__ import annotations

import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import faults
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.handlers import RecordingHandler
from tests.support.stores import Harness


async def status_of(harness: Harness, dispatch_id: str) -> ExecutionStatus:
    row = await harness.store.get_execution(dispatch_id)
    assert row is not None
    return row.status


async def test_digest_drift_blocks_without_calling_execute(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    handler = RecordingHandler(digest_override="e" * 64)
    report = await make_dispatcher(
        harness.store, clock, handlers={"run.create": handler}
    ).dispatch_batch()
    assert handler.inspected == [consumed.dispatch_id]
    assert handler.executed == []
    assert report.outcomes["blocked"] == 1
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.result_code, row.started_at_ms) == (
        ExecutionStatus.BLOCKED,
        "digest_drift",
        None,
    )


async def test_explicit_block_from_inspect_is_terminal(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    handler = RecordingHandler(inspect_kind=ports.InspectKind.BLOCKED)
    await make_dispatcher(harness.store, clock, handlers={"run.create": handler}).dispatch_batch()
    assert handler.executed == []
    assert await status_of(harness, consumed.dispatch_id) is ExecutionStatus.BLOCKED


async def test_transient_inspect_failure_retries_with_backoff_until_the_budget(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=3)
    handler = RecordingHandler(inspect_raises=errors.StoreUnavailable())
    the_dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": handler})
    await the_dispatcher.dispatch_batch()
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.RETRY_WAIT
    assert row.retry_at_ms is not None
    assert row.retry_at_ms > clock.now_ms()
    again = await the_dispatcher.dispatch_batch()
    assert again.observed == 0  # backoff: not due yet
    for _ in range(2):
        clock.advance(ms=120_000)
        await the_dispatcher.dispatch_batch()
    assert len(handler.inspected) == 3
    assert handler.executed == []
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt) == (ExecutionStatus.BLOCKED, 3)


async def test_a_missing_handler_waits_without_spending_attempts_until_one_is_installed(
    harness: Harness, clock: ManualClock
) -> None:
    """No handler: pending again later with the attempt refunded, however often it is looked
    at, so it never ends `blocked`; a dispatcher that has the action then runs it."""
    (consumed,) = await submit_runs(harness.approver_store, clock, 1, max_attempts=2)
    without = make_dispatcher(harness.store, clock, handlers={})
    for _ in range(5):  # more looks than the budget of 2
        with structlog.testing.capture_logs() as logs:
            report = await without.dispatch_batch()
        assert report.observed == 1
        (missing,) = [e for e in logs if e["event"] == "dispatch.handler_missing"]
        assert (missing["log_level"], missing["action_type"]) == ("warning", "run.create")
        row = await harness.store.get_execution(consumed.dispatch_id)
        assert row is not None
        assert (row.status, row.attempt, row.result_code) == (
            ExecutionStatus.PENDING,
            0,
            "handler_missing",
        )
        assert row.eligible_at_ms is not None
        assert row.eligible_at_ms >= clock.now_ms() + 30_000  # waits, not a busy loop
        assert (await without.dispatch_batch()).observed == 0  # not due yet
        clock.advance(ms=90_000)
    handler = RecordingHandler()
    await make_dispatcher(harness.store, clock, handlers={"run.create": handler}).dispatch_batch()
    assert handler.executed == [consumed.dispatch_id]
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt) == (ExecutionStatus.SUCCEEDED, 1)


async def test_execute_raising_is_indeterminate_blocked_and_never_retried(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    handler = RecordingHandler(execute_raises=RuntimeError("boom"))
    the_dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": handler})
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["blocked"] == 1
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.BLOCKED
    assert row.result_code == "indeterminate:execute_raised"
    clock.advance(ms=LEASE_MS * 10)
    await the_dispatcher.dispatch_batch()
    assert handler.executed == [consumed.dispatch_id]


async def test_execute_timeout_is_indeterminate(harness: Harness, clock: ManualClock) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    handler = RecordingHandler(execute_sleep_s=5)
    await make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        lease_ms=600,
        execute_timeout_ms=100,
    ).dispatch_batch()
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert (row.status, row.result_code) == (
        ExecutionStatus.BLOCKED,
        "indeterminate:execute_timeout",
    )


async def test_explicit_results_complete_the_execution(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 2)
    ok = RecordingHandler()
    await make_dispatcher(
        harness.store, clock, handlers={"run.create": ok}, page_size=1
    ).dispatch_batch()
    failing = RecordingHandler(result=ports.ExecuteKind.FAILED)
    await make_dispatcher(
        harness.store, clock, handlers={"run.create": failing}, page_size=1
    ).dispatch_batch()
    statuses = sorted([(await status_of(harness, c.dispatch_id)).value for c in consumed])
    assert statuses == ["failed", "succeeded"]
    ctx = ok.contexts[0]
    assert ctx.idempotency_key == ctx.dispatch.dispatch_id
    assert ctx.identity.owner == "w1"


async def test_an_uncertain_execute_writes_nothing_and_surfaces_as_recovery_required(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    handler = RecordingHandler(result=ports.ExecuteKind.UNCERTAIN)
    the_dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": handler})
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["uncertain"] == 1
    assert await status_of(harness, consumed.dispatch_id) is ExecutionStatus.EXECUTING
    clock.advance(ms=LEASE_MS * 10)
    await the_dispatcher.dispatch_batch()
    assert handler.executed == [consumed.dispatch_id]
    (stuck,) = await harness.store.list_recovery_required(now_ms=clock.now_ms(), limit=10)
    assert stuck.dispatch.dispatch_id == consumed.dispatch_id


async def test_a_receipt_commits_with_the_completion_and_an_invalid_one_costs_only_itself(
    harness: Harness, clock: ManualClock
) -> None:
    consumed_both = await submit_runs(harness.approver_store, clock, 2)
    answered: dict[str, object] = {"status": 201, "bodyDigest": "cd" * 32}
    invalid: dict[str, object] = {"seconds": 0.5}
    for receipt in (answered, invalid):
        await make_dispatcher(
            harness.store,
            clock,
            handlers={"run.create": RecordingHandler(receipt=receipt)},
            page_size=1,
        ).dispatch_batch()
    shown = []
    for consumed in consumed_both:
        detail = await harness.store.show_dispatch(consumed.dispatch_id, now_ms=clock.now_ms())
        assert detail is not None
        assert detail.execution.status is ExecutionStatus.SUCCEEDED
        shown.append(detail.execution.receipt)
    # Which of the two each page took is the due index's order: compare as a multiset.
    assert sorted(shown, key=lambda r: r is None) == [answered, None]


async def test_a_failed_completion_write_leaves_the_row_executing(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    await faults.fail_execution_status(harness, "succeeded")
    handler = RecordingHandler()
    the_dispatcher = make_dispatcher(harness.store, clock, handlers={"run.create": handler})
    report = await the_dispatcher.dispatch_batch()
    assert report.outcomes["completion_write_failed"] == 1
    assert await status_of(harness, consumed.dispatch_id) is ExecutionStatus.EXECUTING
    clock.advance(ms=LEASE_MS + 1)
    again = await the_dispatcher.dispatch_batch()
    assert again.observed == 0
    assert handler.executed == [consumed.dispatch_id]
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.executions[EffectiveStatus.RECOVERY_REQUIRED] == 1


async def test_the_lease_is_renewed_while_a_slow_execute_runs(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    # Renewals every 500 ms during a 1.1 s execute, inside its 1.45 s timeout.
    handler = RecordingHandler(execute_sleep_s=1.1)
    await make_dispatcher(
        harness.store,
        clock,
        handlers={"run.create": handler},
        lease_ms=1500,
        execute_timeout_ms=1450,
    ).dispatch_batch()
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert row.status is ExecutionStatus.SUCCEEDED
    events = await harness.store.execution_events(consumed.dispatch_id)
    executing_version = next(e.version for e in events if e.to_status is ExecutionStatus.EXECUTING)
    assert events[-1].version > executing_version + 1  # renewals moved the version meanwhile


async def test_concurrent_items_each_run_once(harness: Harness, clock: ManualClock) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 12)
    handler = RecordingHandler(execute_sleep_s=0.01)
    report = await make_dispatcher(
        harness.store, clock, handlers={"run.create": handler}, page_size=64, concurrency=4
    ).dispatch_batch()
    assert report.outcomes["succeeded"] == 12
    assert sorted(handler.executed) == sorted(c.dispatch_id for c in consumed)
