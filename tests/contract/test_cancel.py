"""`dispatch cancel`: a waiting dispatch ends `cancelled`, decided by the
database under the claim's fence, by an authenticated principal, with its audit record."""

from __future__ import annotations

import getpass

import anyio
import anyio.lowlevel
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import cancels, errors, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus as E
from qinglong_dispatcher.domain.tools import steps
from tests.support import repositories, tools
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.executions import claim_one, started
from tests.support.stores import OPERATOR_LOGIN, Harness


async def cancel(h: Harness, clock: ManualClock, dispatch_id: str) -> records.Transition:
    return await api.cancel_dispatch(
        h.operator_store, clock, dispatch_id, operator="ops-anna", reason="plan_changed"
    )


async def ledger_and_audit(h: Harness, dispatch_id: str) -> tuple[int, int]:
    events = await h.store.execution_events(dispatch_id)
    return len(events), len(await h.store.audit_events(dispatch_id))


async def test_a_pending_dispatch_is_cancelled_audited_and_never_claimed(
    harness: Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    done = await cancel(harness, clock, consumed.dispatch_id)
    assert (done.outcome, done.status, done.version) == (Outcome.COMPLETED, E.CANCELLED, 1)

    execution = await harness.store.get_execution(consumed.dispatch_id)
    assert execution is not None
    assert (execution.status, execution.attempt, execution.result_code) == (
        E.CANCELLED,
        0,
        "plan_changed",
    )
    assert execution.started_at_ms is None
    assert execution.completed_at_ms == clock.now_ms()
    *_, last = await harness.store.execution_events(consumed.dispatch_id)
    assert (last.from_status, last.to_status, last.version) == (E.PENDING, E.CANCELLED, 1)
    assert last.mutation_id == cancels.mutation_id(consumed.dispatch_id)
    (audit,) = await harness.store.audit_events(consumed.dispatch_id)
    assert (audit.kind, audit.actor, audit.detail_code) == (
        cancels.AUDIT_CANCELLED,
        "ops-anna",
        "pending:plan_changed",
    )
    # The authenticated principal: the operator login's own name, or the OS user.
    assert audit.principal == (
        OPERATOR_LOGIN if harness.dialect == "postgres" else getpass.getuser()
    )

    clock.advance(ms=10 * LEASE_MS)
    report = await make_dispatcher(harness.store, clock).dispatch_batch()
    assert report.claims.get("claimed", 0) == 0
    assert (await harness.store.backlog(now_ms=clock.now_ms())).due == 0


async def test_a_retry_wait_dispatch_is_cancelled(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    claim = await claim_one(harness, clock)
    assert claim.lease is not None
    released = await harness.store.release_preflight(
        claim.lease,
        mutation_id="m-retry",
        kind=states.ReleaseKind.RETRY,
        result_code="transient",
        retry_at_ms=clock.now_ms() + LEASE_MS,
        now_ms=clock.now_ms(),
    )
    assert released.status is E.RETRY_WAIT
    done = await cancel(harness, clock, claim.dispatch_id)
    assert done.status is E.CANCELLED
    execution = await harness.store.get_execution(claim.dispatch_id)
    assert execution is not None
    # The claim's fence stays as it was: attempt 1, its owner and token; no longer due.
    assert (execution.attempt, execution.lease_owner) == (1, "w1")
    assert execution.eligible_at_ms is None
    assert execution.retry_at_ms is None
    *_, last = await harness.store.execution_events(claim.dispatch_id)
    assert (last.from_status, last.to_status) == (E.RETRY_WAIT, E.CANCELLED)


async def test_every_other_state_is_refused_with_its_status_and_writes_nothing(
    harness: Harness, clock: ManualClock
) -> None:
    (done_run,) = await submit_runs(harness.approver_store, clock, 1)
    assert (await make_dispatcher(harness.store, clock).dispatch_batch()).outcomes == {
        "succeeded": 1
    }
    await submit_runs(harness.approver_store, clock, 1)
    executing = await started(harness, clock)
    await submit_runs(harness.approver_store, clock, 1)
    leased = await claim_one(harness, clock)
    (twice,) = await submit_runs(harness.approver_store, clock, 1)
    await cancel(harness, clock, twice.dispatch_id)

    for dispatch_id, status in (
        (done_run.dispatch_id, "succeeded"),
        (executing.dispatch_id, "executing"),
        (leased.dispatch_id, "leased"),
        (twice.dispatch_id, "cancelled"),
    ):
        before = await ledger_and_audit(harness, dispatch_id)
        with pytest.raises(errors.CancelRefused, match=f"is {status}: only pending or retry_wait"):
            await cancel(harness, clock, dispatch_id)
        assert await ledger_and_audit(harness, dispatch_id) == before
    # recovery_required is executing with an expired lease: refused the same way.
    clock.advance(ms=LEASE_MS)
    with pytest.raises(errors.CancelRefused, match="is executing"):
        await cancel(harness, clock, executing.dispatch_id)
    with pytest.raises(errors.DispatchNotFound):
        await cancel(harness, clock, "d-0000000000000000000000000000dead")


@pytest.mark.parametrize(
    ("operator", "reason"), [("", "ok"), ("ops", "free text; DROP"), ("ops", "")]
)
async def test_a_bad_operator_or_reason_is_refused_before_the_store(
    harness: Harness, clock: ManualClock, operator: str, reason: str
) -> None:
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    with pytest.raises(errors.InvalidInput):
        await api.cancel_dispatch(
            harness.operator_store, clock, consumed.dispatch_id, operator=operator, reason=reason
        )
    assert (await harness.store.get_execution(consumed.dispatch_id)).status is E.PENDING  # type: ignore[union-attr]


async def test_only_an_operator_login_may_cancel_on_postgres(
    harness: Harness, clock: ManualClock
) -> None:
    if harness.dialect != "postgres":
        pytest.skip("SQLite: the file's owner is the operator; no login to tell apart")
    (consumed,) = await submit_runs(harness.approver_store, clock, 1)
    # The runtime login may UPDATE every column of the row; the trigger still refuses it.
    with pytest.raises(errors.CancelRefused, match="needs an operator login"):
        await api.cancel_dispatch(
            harness.store, clock, consumed.dispatch_id, operator="ops", reason="x"
        )
    assert await ledger_and_audit(harness, consumed.dispatch_id) == (1, 0)
    assert (await harness.store.get_execution(consumed.dispatch_id)).status is E.PENDING  # type: ignore[union-attr]


async def test_a_cancelled_tool_dispatch_fails_its_waiting_step_run(
    harness: Harness, clock: ManualClock
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    before = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert before is not None
    assert before.status is steps.StepRunStatus.WAITING_APPROVAL
    await cancel(harness, clock, submitted.consumed.dispatch_id)
    after = await repositories.steps(harness.store).get_step_run(submitted.step_run_id)
    assert after is not None
    assert (after.status, after.result_code) == (
        steps.StepRunStatus.FAILED,
        "cancelled:plan_changed",
    )


async def test_a_claim_and_a_cancel_racing_end_exactly_one_way(
    harness: Harness, clock: ManualClock
) -> None:
    """Real concurrent transactions on separate connections: each dispatch is either
    claimed (the cancel refused) or cancelled (never claimed), never both, never neither."""
    consumed = await submit_runs(harness.approver_store, clock, 24)
    claimer = await harness.open_another()
    operator = await harness.open_operator()
    claimed: set[str] = set()
    cancelled: set[str] = set()
    refused: set[str] = set()

    async def claims() -> None:
        for _ in consumed:
            batch = await claimer.claim_due(
                now_ms=clock.now_ms(), owner="w-race", limit=1, lease_ms=LEASE_MS
            )
            claimed.update(c.dispatch_id for c in batch.claimed)
            await anyio.lowlevel.checkpoint()

    async def cancels_() -> None:
        for c in reversed(consumed):
            try:
                await api.cancel_dispatch(
                    operator, clock, c.dispatch_id, operator="ops", reason="race"
                )
                cancelled.add(c.dispatch_id)
            except errors.CancelRefused:
                refused.add(c.dispatch_id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(claims)
        tg.start_soon(cancels_)
    ids = {c.dispatch_id for c in consumed}
    assert claimed | cancelled == ids
    assert not claimed & cancelled
    assert refused <= claimed
    for dispatch_id in ids:
        events = [e.to_status for e in await harness.store.execution_events(dispatch_id)]
        assert events in ([E.PENDING, E.LEASED], [E.PENDING, E.CANCELLED]), events
