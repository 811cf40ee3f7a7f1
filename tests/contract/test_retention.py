"""Retention (migration 0009): a prune removes whole finished trees older than the cutoff, and
nothing else; every other DELETE is still refused by the database."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.domain import approvals, fencing, records, recovery, retention, states
from tests.support import faults, tools
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.executions import start_request
from tests.support.recovery import manual_resolution, started_execution
from tests.support.stores import Harness

DAY_MS = retention.DAY_MS

TREE_TABLES = (
    "approved_action_dispatches",
    "approved_action_dispatch_executions",
    "execution_events",
    "approved_run_action_receipts",
    "recovery_resolutions",
    "recovery_observations",
)


def _pruner(h: Harness) -> ports.Store:
    assert h.pruner_store is not None
    return h.pruner_store


async def _rows(h: Harness, table: str, where: str) -> int:
    name = faults.table(h, table)
    return int(await h.scalar(f"SELECT count(*) AS n FROM {name} WHERE {where}"))


async def _tree(h: Harness, dispatch_id: str, approval_id: str, action_ref: str) -> dict[str, int]:
    """Rows of one dispatch's tree, per table."""
    counts = {t: await _rows(h, t, f"dispatch_id = '{dispatch_id}'") for t in TREE_TABLES}
    counts["approval_requests"] = await _rows(
        h, "approval_requests", f"approval_request_id = '{approval_id}'"
    )
    counts["action_plans"] = await _rows(h, "action_plans", f"action_ref = '{action_ref}'")
    return counts


async def _start_one(h: Harness, clock: ManualClock, dispatch_id: str) -> records.ExecutionIdentity:
    """Claim this very dispatch and commit its start barrier."""
    claim = await h.store.claim(
        dispatch_id, now_ms=clock.now_ms(), owner="w1", token=f"t-{dispatch_id}", lease_ms=LEASE_MS
    )
    (started,) = await h.store.start(
        [start_request(claim)], now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert started.identity is not None
    return started.identity


async def _complete_one(h: Harness, clock: ManualClock, dispatch_id: str) -> None:
    """Claim, start and complete this very dispatch `succeeded` (no Run)."""
    identity = await _start_one(h, clock, dispatch_id)
    await h.store.complete(
        identity,
        mutation_id=fencing.mutation_id(dispatch_id, identity.attempt, "complete"),
        completion=states.Completion.SUCCEEDED,
        result_code="ok",
        now_ms=clock.now_ms(),
    )


async def _build(h: Harness, clock: ManualClock) -> dict[str, tuple[str, str, str]]:
    """Dispatches in every kind of state: name → (dispatch id, approval id, action ref).

    At t0: two succeeded by the dispatcher (with Run and receipt), one failed by an operator
    after recovery (resolution, observation, audit record), one `recovery_required` (executing,
    lease expired), one pending. A day later: one succeeded, too new to prune."""
    made: dict[str, tuple[str, str, str]] = {}

    def keep(name: str, consumed: approvals.Consumed) -> None:
        made[name] = (consumed.dispatch_id, consumed.approval_request_id, consumed.action_ref)

    first, second = await submit_runs(h.approver_store, clock, 2, project="old")
    report = await make_dispatcher(h.store, clock).dispatch_batch()
    assert report.outcomes["succeeded"] == 2
    keep("succeeded_1", first)
    keep("succeeded_2", second)

    (resolved,) = await submit_runs(h.approver_store, clock, 1, project="resolved")
    dispatch, fence = await started_execution(h, clock)
    clock.advance(ms=LEASE_MS + 1)
    await h.store.record_observation(
        dispatch.dispatch_id,
        outcome=recovery.ObservationOutcome.MISSING,
        reason_code="no_receipt",
        now_ms=clock.now_ms(),
    )
    settled = await h.operator_store.resolve_recovery(
        manual_resolution(fence, dispatch.project_id), now_ms=clock.now_ms()
    )
    assert settled.outcome is records.Outcome.COMPLETED
    keep("resolved", resolved)

    (stuck,) = await submit_runs(h.approver_store, clock, 1, project="stuck")
    await started_execution(h, clock)
    keep("recovery_required", stuck)
    (pending,) = await submit_runs(h.approver_store, clock, 1, project="waiting")
    keep("pending", pending)

    clock.advance(ms=DAY_MS)
    (new,) = await submit_runs(h.approver_store, clock, 1, project="new")
    await _complete_one(h, clock, new.dispatch_id)
    keep("new", new)
    clock.advance(ms=LEASE_MS + 1)
    return made


async def test_prune_removes_whole_terminal_trees_older_than_the_cutoff_and_nothing_else(
    harness: Harness, clock: ManualClock
) -> None:
    made = await _build(harness, clock)
    before = {name: await _tree(harness, *ids) for name, ids in made.items()}
    assert before["resolved"]["recovery_resolutions"] == 1
    assert before["resolved"]["recovery_observations"] == 1
    assert before["succeeded_1"]["approved_run_action_receipts"] == 1
    runs_before = await _rows(harness, "runs", "1 = 1")
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.executions[states.EffectiveStatus.RECOVERY_REQUIRED] == 1

    cutoff = clock.now_ms() - DAY_MS // 2
    dry = await _pruner(harness).prune_batch(
        cutoff_ms=cutoff, audit_cutoff_ms=0, limit=500, dry_run=True
    )
    assert dry == retention.PruneCounts(dispatches=3, audit_events=0)
    assert await _tree(harness, *made["succeeded_1"]) == before["succeeded_1"]

    pruned = await _pruner(harness).prune_batch(cutoff_ms=cutoff, audit_cutoff_ms=0, limit=500)

    assert pruned == retention.PruneCounts(dispatches=3, audit_events=0)
    for name in ("succeeded_1", "succeeded_2", "resolved"):
        assert set((await _tree(harness, *made[name])).values()) == {0}, name
    for name in ("recovery_required", "pending", "new"):
        assert await _tree(harness, *made[name]) == before[name], name
    # Runs are business data: the Runs the pruned dispatches created are all still there.
    assert await _rows(harness, "runs", "1 = 1") == runs_before == 2
    assert not await _rows(harness, "prune_permits", "1 = 1")
    again = await _pruner(harness).prune_batch(cutoff_ms=cutoff, audit_cutoff_ms=0, limit=500)
    assert again.empty


async def test_a_batch_takes_at_most_its_limit_oldest_first(
    harness: Harness, clock: ManualClock
) -> None:
    consumed = await submit_runs(harness.approver_store, clock, 5)
    for each in consumed:
        await _complete_one(harness, clock, each.dispatch_id)
        clock.advance(ms=1)
    cutoff = clock.now_ms()
    first = await _pruner(harness).prune_batch(cutoff_ms=cutoff, audit_cutoff_ms=0, limit=2)
    assert first.dispatches == 2
    left = {c.dispatch_id for c in consumed if await harness.store.get_dispatch(c.dispatch_id)}
    assert left == {c.dispatch_id for c in consumed[2:]}


async def test_audit_records_go_by_their_own_cutoff(harness: Harness, clock: ManualClock) -> None:
    await submit_runs(harness.approver_store, clock, 2)
    audit_table = faults.table(harness, "security_audit_events")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {audit_table}") == 6  # 3 each
    # Their subjects finish (the audit of a live subject stays: the test below).
    assert (await make_dispatcher(harness.store, clock).dispatch_batch()).outcomes["succeeded"] == 2
    newest = int(await harness.scalar(f"SELECT max(committed_at_ms) AS m FROM {audit_table}"))
    # The audit cutoff is on the database clock and may not be in its future: let it pass
    # the newest record's millisecond.
    if await harness.store.database_now_ms() <= newest:
        await anyio.sleep(0.002)
    now = await harness.store.database_now_ms()
    kept = await _pruner(harness).prune_batch(cutoff_ms=0, audit_cutoff_ms=now - DAY_MS, limit=500)
    assert kept.audit_events == 0
    gone = await _pruner(harness).prune_batch(cutoff_ms=0, audit_cutoff_ms=now, limit=4)
    assert gone == retention.PruneCounts(dispatches=0, audit_events=4)
    # The trees themselves are past no tree cutoff: their dispatches stay.
    assert await _rows(harness, "approved_action_dispatches", "1 = 1") == 2


@pytest.mark.parametrize(
    "table",
    [
        "approved_action_dispatches",
        "approved_action_dispatch_executions",
        "execution_events",
        "approved_run_action_receipts",
        "approval_requests",
        "action_plans",
        "security_audit_events",
    ],
)
async def test_a_delete_without_a_permit_is_refused_even_of_a_finished_tree(
    harness: Harness, clock: ManualClock, table: str
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    assert (await make_dispatcher(harness.store, clock).dispatch_batch()).outcomes["succeeded"] == 1
    name = faults.table(harness, table)
    with pytest.raises(Exception, match=r"immutable|only a prune|permission denied"):
        await harness.raw(f"DELETE FROM {name}")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {name}") >= 1


async def test_a_permit_names_only_a_terminal_tree_before_a_past_cutoff(
    harness: Harness, clock: ManualClock
) -> None:
    (executing,) = await submit_runs(harness.approver_store, clock, 1, project="p-exec")
    (pending,) = await submit_runs(harness.approver_store, clock, 1, project="p-wait")
    (done,) = await submit_runs(harness.approver_store, clock, 1, project="p-done")
    await _start_one(harness, clock, executing.dispatch_id)
    await _complete_one(harness, clock, done.dispatch_id)
    finished_at = clock.now_ms()
    clock.advance(ms=LEASE_MS + 1)  # the executing lease expired: recovery_required
    permits = faults.table(harness, "prune_permits")
    now = await harness.store.database_now_ms()

    def permit(consumed: approvals.Consumed, project: str, cutoff: int) -> str:
        return (
            f"INSERT INTO {permits} (dispatch_id, approval_request_id, project_id, action_ref, "
            f"cutoff_ms) VALUES ('{consumed.dispatch_id}', '{consumed.approval_request_id}', "
            f"'{project}', '{consumed.action_ref}', {cutoff})"
        )

    # The one admissible permit, to show the refusals below are not about the SQL itself.
    await harness.raw(permit(done, "p-done", finished_at + 1))
    await harness.raw(f"DELETE FROM {permits}")
    for refused in (
        permit(executing, "p-exec", now),  # recovery_required
        permit(pending, "p-wait", now),  # pending
        permit(done, "p-done", finished_at),  # finished at, not before, this cutoff
        permit(done, "p-done", now + DAY_MS),  # a cutoff in the future
        permit(done, "p-other", finished_at + 1),  # not the tree's own plan
    ):
        with pytest.raises(Exception, match="prune_permits"):
            await harness.raw(refused)
    assert not await _rows(harness, "prune_permits", "1 = 1")


async def test_a_tool_step_keeps_its_dispatch_tree_with_its_run(
    harness: Harness, clock: ManualClock, tmp_path: Path
) -> None:
    run = await tools.live_run(harness, clock)
    submitted = await tools.submit_tool(harness, clock, run)
    handlers = tools.tool_handlers(harness.store, clock, tmp_path)
    report = await make_dispatcher(harness.store, clock, handlers=handlers).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    # A second step blocked before its barrier: only its StepRun names its approval.
    refused = await tools.submit_tool(harness, clock, run, content="never written\n")
    claim = (
        await harness.store.claim_due(now_ms=clock.now_ms(), owner="w1", limit=1, lease_ms=LEASE_MS)
    ).claimed[0]
    assert claim.lease is not None
    await harness.store.release_preflight(
        claim.lease,
        mutation_id=f"{refused.consumed.dispatch_id}:release",
        kind=states.ReleaseKind.BLOCKED,
        result_code="refused_by_test",
        retry_at_ms=None,
        now_ms=clock.now_ms(),
    )
    clock.advance(ms=DAY_MS)

    pruned = await _pruner(harness).prune_batch(
        cutoff_ms=clock.now_ms(), audit_cutoff_ms=0, limit=500
    )

    # The run.create tree goes; the tool steps' StepRuns (and the first one's start barrier)
    # name theirs, which stay with the Run.
    assert pruned.dispatches == 1
    for kept in (submitted, refused):
        dispatch_id = kept.consumed.dispatch_id
        assert await harness.store.get_dispatch(dispatch_id) is not None
        assert await _rows(harness, "execution_events", f"dispatch_id = '{dispatch_id}'") >= 2
    assert await _rows(harness, "runs", "1 = 1") == 1


async def test_an_audit_permit_admits_only_records_before_its_cutoff(
    harness: Harness, clock: ManualClock
) -> None:
    await submit_runs(harness.approver_store, clock, 1)
    audit = faults.table(harness, "security_audit_events")
    oldest = int(await harness.scalar(f"SELECT min(committed_at_ms) AS m FROM {audit}"))
    await harness.raw(
        f"INSERT INTO {faults.table(harness, 'audit_prune_permits')} (cutoff_ms) VALUES ({oldest})"
    )
    with pytest.raises(Exception, match="immutable"):
        await harness.raw(f"DELETE FROM {audit}")
    assert await harness.scalar(f"SELECT count(*) AS n FROM {audit}") == 3


async def test_a_prune_keeps_the_audit_of_live_subjects(harness: Harness) -> None:
    # The real clock: a pending request is live on the database's clock too.
    now = ManualClock(int(time.time() * 1000))
    the_api = make_api(harness.approver_store, now)
    # The finished subject first: a table's newest record is never pruned on SQLite.
    (done,) = await submit_runs(harness.approver_store, now, 1, project="done")
    await _complete_one(harness, now, done.dispatch_id)
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    pending = await the_api.create_approval(
        "run.create", plan.to_canonical_dict(), requested_by="alice"
    )
    (waiting,) = await submit_runs(harness.approver_store, now, 1, project="waiting")
    await anyio.sleep(0.01)  # every record's millisecond is past on the database's clock
    audit = faults.table(harness, "security_audit_events")
    live = (pending.approval_request_id, waiting.approval_request_id)
    live_rows = f"subject_id IN ('{live[0]}', '{live[1]}')"
    kept = await harness.raw(f"SELECT * FROM {audit} WHERE {live_rows} ORDER BY event_id")
    assert len(kept) == 4  # created; created, approved, consumed
    cutoff = await harness.store.database_now_ms()

    dry = await _pruner(harness).prune_batch(
        cutoff_ms=0, audit_cutoff_ms=cutoff, limit=500, dry_run=True
    )
    pruned = await _pruner(harness).prune_batch(cutoff_ms=0, audit_cutoff_ms=cutoff, limit=500)

    assert dry == pruned == retention.PruneCounts(dispatches=0, audit_events=3)  # done's three
    assert await harness.raw(f"SELECT * FROM {audit} ORDER BY event_id") == kept


async def test_ids_never_run_backwards_after_everything_was_pruned(
    harness: Harness, clock: ManualClock
) -> None:
    """The audit export's cursor is an id per table: a prune of every finished tree and record
    must never let a later row take an id already exported (SQLite's rowids, without
    AUTOINCREMENT, are reused once a table's highest row is gone)."""
    tables = ("execution_events", "security_audit_events")
    for each in await submit_runs(harness.approver_store, clock, 3):
        await _complete_one(harness, clock, each.dispatch_id)
    highest = {
        t: int(await harness.scalar(f"SELECT max(event_id) AS m FROM {faults.table(harness, t)}"))
        for t in tables
    }
    clock.advance(ms=DAY_MS)
    await anyio.sleep(0.002)  # every record's millisecond is past on the database's clock
    everything = await harness.store.database_now_ms()
    pruned = await _pruner(harness).prune_batch(
        cutoff_ms=clock.now_ms(), audit_cutoff_ms=everything, limit=500
    )
    assert pruned.dispatches >= 2, pruned
    assert pruned.audit_events >= 2, pruned
    survivors = {t: await _rows(harness, t, f"event_id <= {n}") for t, n in highest.items()}

    for each in await submit_runs(harness.approver_store, clock, 1):
        await _complete_one(harness, clock, each.dispatch_id)
    for table, before in highest.items():
        # Every new row lies above every id seen before the prune.
        assert await _rows(harness, table, f"event_id <= {before}") == survivors[table], table
        assert await _rows(harness, table, f"event_id > {before}") > 0, table
