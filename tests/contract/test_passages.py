"""The passage (`ports.PageStore.pass_due`) of `run.create`, against the store itself and
through the dispatcher: each due row goes from `pending` straight to `succeeded` with its Run
and receipt in ONE transaction, one ledger line; a row whose plan is not the approved one, or
whose effect exists, is left waiting for the claim; a frozen one is not read; the dispatcher's
claim takes what the passage left (docs/decisions/0055); each outcome of a page's one statement
is told once, to whoever hears it (docs/decisions/0057)."""

from __future__ import annotations

import time

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.actions.run_create import tables as run_create_tables
from qinglong_dispatcher.domain import errors, freezes, notifications, records
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import faults, outbox, repositories, stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness

E = ExecutionStatus


def _handler(harness: Harness, clock: ManualClock) -> run_create.RunCreateHandler:
    return run_create.RunCreateHandler(harness.store, repositories.runs(harness.store), clock)


async def _pass(
    harness: Harness,
    clock: ManualClock,
    effect_of: ports.EffectOf | None = None,
    *,
    limit: int = 16,
) -> ports.PassageBatch:
    handler = _handler(harness, clock)

    def passage_effect(dispatch: records.Dispatch, stored: ports.StoredPlan, at: int) -> object:
        return handler.passage_effect(dispatch, stored, started_at_ms=at)

    return await harness.store.pass_due(
        "run.create",
        run_create_tables.TABLES,
        effect_of or passage_effect,
        now_ms=clock.now_ms(),
        owner="w1",
        limit=limit,
    )


async def _ledger(harness: Harness, dispatch_id: str) -> list[tuple[E | None, E]]:
    return [(e.from_status, e.to_status) for e in await harness.store.execution_events(dispatch_id)]


async def _attempts_and_events(
    harness: Harness, run_id: str
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """The Run's attempts (number, status) and events (sequence, type), as written."""
    attempts = await harness.raw(
        f"SELECT attempt_no, status FROM {faults.table(harness, 'run_attempts')} "
        f"WHERE run_id = '{run_id}' ORDER BY attempt_no"
    )
    events = await harness.raw(
        f"SELECT seq, event_type FROM {faults.table(harness, 'run_events')} "
        f"WHERE run_id = '{run_id}' ORDER BY seq"
    )
    return (
        [(int(a["attempt_no"]), str(a["status"])) for a in attempts],
        [(int(e["seq"]), str(e["event_type"])) for e in events],
    )


async def test_a_passage_writes_each_row_once_with_its_run_and_receipt(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 3)
    commits = harness.store.commits

    batch = await _pass(harness, clock)

    assert harness.store.commits - commits == 1
    assert (batch.observed, len(batch.passed)) == (3, 3)
    for c in consumed:
        row = await harness.store.get_execution(c.dispatch_id)
        assert row is not None
        assert (row.status, row.attempt, row.takeovers, row.lease_owner) == (
            E.SUCCEEDED,
            1,
            0,
            "w1",
        )
        assert row.started_at_ms == row.completed_at_ms == clock.now_ms()
        assert await _ledger(harness, c.dispatch_id) == [
            (None, E.PENDING),
            (E.PENDING, E.SUCCEEDED),
        ]
        receipt = await repositories.runs(harness.store).get_receipt(c.dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        assert (receipt.execution_attempt, receipt.execution_version) == (1, row.version)
        assert await _attempts_and_events(harness, receipt.resource_id) == (
            [(1, "queued")],
            [(1, "run.created")],
        )
    # Nothing is left to pass or claim.
    assert (await _pass(harness, clock)).observed == 0


@pytest.mark.parametrize("heard", [("dispatch.succeeded",), ("dispatch.failed",)])
async def test_a_page_passed_in_one_statement_tells_each_outcome_heard_once(
    harness: Harness, clock: ManualClock, heard: tuple[str, ...]
) -> None:
    """The page's rows change in one statement: each is told once, with its own ids, when
    someone hears `dispatch.succeeded`; when only failures are heard, none is."""
    owner = await harness.owner()
    await owner.add_subscription(
        notifications.Subscription(
            name="listener", url="https://listener.invalid/hook", secret_ref="env:QL_L", kinds=heard
        )
    )
    consumed = await submit_runs(harness.approver_store, clock, 4)

    assert len((await _pass(harness, clock)).passed) == 4

    told = [e for e in await outbox.events(harness) if e["kind"].startswith("dispatch.")]
    if heard == ("dispatch.failed",):
        assert told == []
        return
    assert sorted(e["subject_id"] for e in told) == sorted(c.dispatch_id for c in consumed)
    by_id = {e["subject_id"]: e["payload"] for e in told}
    for c in consumed:
        assert by_id[c.dispatch_id] == {
            "dispatchId": c.dispatch_id,
            "approvalRequestId": c.approval_request_id,
            "actionRef": by_id[c.dispatch_id]["actionRef"],
            "actionDigest": by_id[c.dispatch_id]["actionDigest"],
            "status": "succeeded",
            "attempt": 1,
            "resultCode": "run_created",
        }


async def test_a_row_whose_plan_is_not_the_approved_one_is_left_for_the_claim(
    harness: Harness, clock: ManualClock
) -> None:
    drifted, fine = await submit_runs(harness.approver_store, clock, 2)
    handler = _handler(harness, clock)

    def effect_of(dispatch: records.Dispatch, stored: ports.StoredPlan, at: int) -> object:
        if dispatch.dispatch_id == drifted.dispatch_id:
            raise errors.PlanInvalid("drifted", code="digest_drift")
        return handler.passage_effect(dispatch, stored, started_at_ms=at)

    batch = await _pass(harness, clock, effect_of)

    assert [p.dispatch.dispatch_id for p in batch.passed] == [fine.dispatch_id]
    row = await harness.store.get_execution(drifted.dispatch_id)
    assert row is not None
    assert (row.status, row.attempt) == (E.PENDING, 0)
    assert await _ledger(harness, drifted.dispatch_id) == [(None, E.PENDING)]
    # The dispatcher's passage leaves it again (its plan is fine: it passes now).
    report = await make_dispatcher(harness.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 1, report


async def test_a_frozen_row_is_not_read_by_the_passage(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    owner = await harness.owner()
    now_ms = int(time.time() * 1000)
    await owner.add_freeze(
        freezes.NewFreeze(from_ms=now_ms - 1000, until_ms=now_ms + 3_600_000, reason="release")
    )

    batch = await _pass(harness, clock)

    assert (batch.observed, batch.passed) == (0, ())
    row = await harness.store.get_execution(consumed.dispatch_id)
    assert row is not None
    assert row.status is E.PENDING


async def test_a_failed_passage_writes_nothing(harness: Harness, clock: ManualClock) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 2)
    await faults.fail_inserts_into(harness, "run_events")

    with pytest.raises(errors.StoreError):
        await _pass(harness, clock)

    for c in consumed:
        row = await harness.store.get_execution(c.dispatch_id)
        assert row is not None
        assert (row.status, row.attempt) == (E.PENDING, 0)
        assert await repositories.runs(harness.store).get_receipt(c.dispatch_id) is None
    runs = int(await harness.scalar(f"SELECT count(*) FROM {faults.table(harness, 'runs')}"))
    assert runs == 0


async def test_replicas_pass_disjoint_pages_and_never_wait_for_each_other(
    pg: Harness, clock: ManualClock
) -> None:
    """PostgreSQL: a row another replica's transaction holds is skipped, not waited for."""
    held, free = await submit_runs(pg.approver_store, clock, 2)
    database = str(await pg.scalar("SELECT current_database()"))
    other = await asyncpg.connect(stores.runtime_url(database), timeout=5)
    try:
        async with other.transaction():
            await other.execute(
                "SELECT 1 FROM qinglong.approved_action_dispatch_executions "
                "WHERE dispatch_id = $1 FOR UPDATE",
                held.dispatch_id,
            )
            with anyio.fail_after(5):
                batch = await _pass(pg, clock)
    finally:
        await other.close()

    assert [p.dispatch.dispatch_id for p in batch.passed] == [free.dispatch_id]
    assert batch.observed == 1
    row = await pg.store.get_execution(held.dispatch_id)
    assert row is not None
    assert row.status is E.PENDING
