"""The page transaction (`ports.PageStore.commit_page`) of `run.create`, against the store itself.

Every item of a page starts, takes effect and completes in ONE transaction; an item whose fence
or binding no longer holds, whose effect already exists, or whose statements fail is
`not_taken` with nothing written; a crash before the commit writes nothing of the page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.run_create import handler as run_create
from qinglong_dispatcher.actions.run_create import tables as run_create_tables
from qinglong_dispatcher.domain import fencing, records, runs
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from tests.support import faults, page_crash, repositories
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import LEASE_MS, make_dispatcher
from tests.support.recovery import holders, insert_row, plant_run_and_receipt
from tests.support.stores import Harness

COMMITTED = ports.PageOutcome.COMMITTED
NOT_TAKEN = ports.PageOutcome.NOT_TAKEN


class SimulatedCrash(BaseException):
    """Stands for the process dying inside the page transaction, before its commit."""


# -- helpers --------------------------------------------------------------------------------


async def claim_page(
    harness: Harness, clock: ManualClock, limit: int, owner: str = "w1"
) -> list[records.Claim]:
    batch = await harness.store.claim_due(
        now_ms=clock.now_ms(), owner=owner, limit=limit, lease_ms=LEASE_MS
    )
    assert len(batch.claimed) == limit
    return list(batch.claimed)


async def page_items(
    harness: Harness, clock: ManualClock, claims: Sequence[records.Claim]
) -> list[ports.PageItem[runs.Run]]:
    """The PageItems `page_path.PagePath` builds: inspect, then `page_effect`."""
    handler = run_create.RunCreateHandler(harness.store, repositories.runs(harness.store), clock)
    items = []
    for claim in claims:
        assert claim.lease is not None
        assert claim.dispatch is not None
        inspected = await handler.inspect(claim.dispatch)
        assert inspected.action_digest == claim.dispatch.action_digest
        run = handler.page_effect(claim.dispatch, started_at_ms=clock.now_ms())
        items.append(page_item(claim.lease, claim.dispatch, run))
    return items


def page_item(
    lease: records.Lease, dispatch: records.Dispatch, run: runs.Run
) -> ports.PageItem[runs.Run]:
    return ports.PageItem(
        request=records.StartRequest(
            lease=lease,
            approval_request_id=dispatch.approval_request_id,
            action_digest=dispatch.action_digest,
        ),
        dispatch=dispatch,
        effect=run,
    )


async def commit(
    store: ports.Store, clock: ManualClock, items: Sequence[ports.PageItem[runs.Run]]
) -> dict[str, ports.PageResult]:
    results = await store.commit_page(
        run_create_tables.TABLES, items, now_ms=clock.now_ms(), lease_ms=LEASE_MS
    )
    assert [r.dispatch_id for r in results] == [i.dispatch.dispatch_id for i in items]
    return {r.dispatch_id: r for r in results}


async def count_where(harness: Harness, table: str, where: str) -> int:
    return int(
        await harness.scalar(
            f"SELECT count(*) AS n FROM {faults.table(harness, table)} WHERE {where}"
        )
    )


async def runs_of(harness: Harness, dispatch_id: str) -> int:
    return await count_where(harness, "runs", f"idempotency_key = '{dispatch_id}'")


async def receipts_of(harness: Harness, dispatch_id: str) -> int:
    return await count_where(
        harness, "approved_run_action_receipts", f"dispatch_id = '{dispatch_id}'"
    )


def ledger_shape(events: Sequence[records.ExecutionEvent]) -> list[tuple[Any, ...]]:
    """An execution's ledger with its own identifiers named generically, for comparing the
    lines of two different dispatches: (version, from, to, attempt, owner, token, mutation id,
    result code); the token is the one its claim handed out."""
    (claimed,) = [e for e in events if e.to_status is ExecutionStatus.LEASED]
    shape = []
    for e in events:
        token = (
            None
            if e.lease_token is None
            else ("CLAIM" if e.lease_token == claimed.lease_token else e.lease_token)
        )
        mutation = None if e.mutation_id is None else e.mutation_id.replace(e.dispatch_id, "D")
        shape.append(
            (
                e.version,
                e.from_status,
                e.to_status,
                e.attempt,
                e.lease_owner,
                token,
                mutation,
                e.result_code,
            )
        )
    return shape


async def assert_untouched(
    harness: Harness,
    dispatch_id: str,
    before: records.Execution,
    events_before: Sequence[records.ExecutionEvent],
) -> None:
    """Nothing of the page was written for this dispatch."""
    assert await harness.store.get_execution(dispatch_id) == before
    assert await harness.store.execution_events(dispatch_id) == list(events_before)


# -- a. the whole page commits ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5])
async def test_a_page_commits_whole_with_the_per_item_paths_ledger(
    harness: Harness, clock: ManualClock, n: int
) -> None:
    store = harness.store
    repository = repositories.runs(store)
    # The reference: one item driven through the per-item path (barrier, execute, complete).
    (reference,) = await submit_runs(harness.approver_store, clock, 1, project="proj-ref")
    per_item = page_crash.PerItemOnly(run_create.RunCreateHandler(store, repository, clock))
    report = await make_dispatcher(
        store, clock, owner="w1", handlers={"run.create": per_item}
    ).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    reference_ledger = ledger_shape(await store.execution_events(reference.dispatch_id))
    reference_row = await store.get_execution(reference.dispatch_id)
    assert reference_row is not None

    consumed = await submit_runs(harness.approver_store, clock, n)
    clock.advance(ms=5)
    claims = await claim_page(harness, clock, n)
    clock.advance(ms=7)
    items = await page_items(harness, clock, claims)
    runs_before = await count_where(harness, "runs", "1 = 1")
    commits_before = store.commits
    results = await commit(store, clock, items)
    assert store.commits - commits_before == 1  # the whole page: one transaction
    assert await count_where(harness, "runs", "1 = 1") == runs_before + n
    assert {c.dispatch_id for c in consumed} == set(results)

    now = clock.now_ms()
    for claim, item in zip(claims, items, strict=True):
        assert claim.lease is not None
        dispatch = item.dispatch
        result = results[dispatch.dispatch_id]
        assert (result.outcome, result.reason) == (COMMITTED, None)
        identity = result.identity
        assert identity == fencing.started_identity(
            claim.lease,
            started_at_ms=now,
            version=claim.lease.version + 1,
            lease_expires_at_ms=fencing.start_lease_expiry(
                claim.lease, now_ms=now, lease_ms=LEASE_MS
            ),
        )

        events = await store.execution_events(dispatch.dispatch_id)
        assert ledger_shape(events) == reference_ledger
        assert [(e.from_status, e.to_status) for e in events] == [
            (None, ExecutionStatus.PENDING),
            (ExecutionStatus.PENDING, ExecutionStatus.LEASED),
            (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING),
            (ExecutionStatus.EXECUTING, ExecutionStatus.SUCCEEDED),
        ]
        assert events[2].lease_token == events[3].lease_token == claim.lease.token
        assert events[3].mutation_id == fencing.mutation_id(dispatch.dispatch_id, 1, "complete")
        if harness.dialect == "postgres":  # transaction_timestamp(): start and end, one commit
            assert events[2].committed_at_ms == events[3].committed_at_ms

        row = await store.get_execution(dispatch.dispatch_id)
        assert row is not None
        assert row.status is ExecutionStatus.SUCCEEDED
        assert row.effective_status(now) is EffectiveStatus.SUCCEEDED
        same_as_reference = ("version", "attempt", "lease_owner", "result_code")
        for name in same_as_reference:
            assert getattr(row, name) == getattr(reference_row, name), name
        assert row.version == claim.lease.version + 2
        assert (row.started_at_ms, row.completed_at_ms) == (now, now)
        assert row.result_mutation_id == events[3].mutation_id

        run = await repository.get_run_by_key(dispatch.project_id, dispatch.dispatch_id)
        assert run is not None
        assert run == item.effect  # exactly the Run the page was given
        assert await runs_of(harness, dispatch.dispatch_id) == 1
        receipt = await repository.get_receipt(dispatch.dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        assert receipt.resource_id == run.run_id
        assert receipt.execution_version == events[2].version
        assert (
            runs.receipt_mismatch(
                receipt,
                run,
                approval_request_id=dispatch.approval_request_id,
                project_id=dispatch.project_id,
                action_digest=dispatch.action_digest,
                attempt=1,
                started_at_ms=now,
            )
            is None
        )
        where = f"run_id = '{run.run_id}'"
        assert await count_where(harness, "run_attempts", where) == 1
        assert (
            await count_where(
                harness, "run_events", where + " AND seq = 1 AND event_type = 'run.created'"
            )
            == 1
        )
        assert await count_where(harness, "run_events", where) == 1
        assert await store.get_resolution(dispatch.dispatch_id) is None


# -- b. mixed fences -------------------------------------------------------------------------


async def plant_run_only(harness: Harness, run: runs.Run, token: str) -> None:
    """A Run holding the dispatch id as its idempotency key, without a receipt, written by the
    holder of the lease `token`."""
    row = runs.run_row(dataclasses.replace(run, run_id="r-run-only"))
    row["updated_at_ms"] = run.created_at_ms
    await insert_row(harness, "runs", holders(harness, row, token))


async def test_items_whose_fence_fails_or_whose_effect_exists_are_not_taken_and_unwritten(
    harness: Harness, clock: ManualClock
) -> None:
    store = harness.store
    repository = repositories.runs(store)
    consumed = await submit_runs(harness.approver_store, clock, 6)
    ids = [c.dispatch_id for c in consumed]
    taken_over_id = ids[0]
    # The taken-over item: w1 claims it, its lease expires, w2 claims it again.
    first = await store.claim(
        taken_over_id, now_ms=clock.now_ms(), owner="w1", token="tok-old", lease_ms=LEASE_MS
    )
    assert first.outcome is Outcome.CLAIMED
    assert first.lease is not None
    assert first.dispatch is not None
    clock.advance(ms=LEASE_MS + 1)
    takeover = await store.claim(
        taken_over_id, now_ms=clock.now_ms(), owner="w2", token="tok-new", lease_ms=LEASE_MS
    )
    assert takeover.outcome is Outcome.CLAIMED
    # The other five, claimed by w1 now.
    claims = {c.dispatch_id: c for c in await claim_page(harness, clock, 5)}
    assert set(claims) == set(ids[1:])
    stale_id, receipt_id, run_only_id, good_ids = ids[1], ids[2], ids[3], ids[4:]
    clock.advance(ms=10)
    # The stale item: its lease was renewed since the claim handed out the fence used below.
    stale_claim = claims[stale_id]
    assert stale_claim.lease is not None
    renewal = await store.renew(stale_claim.lease, now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert renewal.outcome is Outcome.RENEWED

    handler = run_create.RunCreateHandler(store, repository, clock)
    items = [
        page_item(first.lease, first.dispatch, await _run_for(handler, first.dispatch, clock))
    ] + await page_items(harness, clock, [claims[i] for i in ids[1:]])
    by_id = {i.dispatch.dispatch_id: i for i in items}
    # The effect already exists: a receipt (and its Run) for one, a bare Run for another.
    receipt_lease = claims[receipt_id].lease
    assert receipt_lease is not None
    # A receipt for a row that never started is refused by the database itself; its Run,
    # written first, stays, so the item's effect exists all the same.
    with pytest.raises(Exception, match="binds its started execution"):
        await plant_run_and_receipt(
            harness,
            clock,
            by_id[receipt_id].dispatch,
            fencing.started_identity(
                receipt_lease,
                started_at_ms=clock.now_ms(),
                version=receipt_lease.version + 1,
                lease_expires_at_ms=receipt_lease.expires_at_ms,
            ),
        )
    run_only_lease = claims[run_only_id].lease
    assert run_only_lease is not None
    await plant_run_only(harness, by_id[run_only_id].effect, run_only_lease.token)

    refused = [taken_over_id, stale_id, receipt_id, run_only_id]
    before = {i: await store.get_execution(i) for i in refused}
    events_before = {i: await store.execution_events(i) for i in refused}
    runs_before = await count_where(harness, "runs", "1 = 1")
    commits_before = store.commits
    results = await commit(store, clock, items)
    assert store.commits - commits_before == 1

    expected = {
        taken_over_id: (NOT_TAKEN, "start_refused"),
        stale_id: (NOT_TAKEN, "start_refused"),
        receipt_id: (NOT_TAKEN, "effect_exists"),
        run_only_id: (NOT_TAKEN, "effect_exists"),
    } | dict.fromkeys(good_ids, (COMMITTED, None))
    assert {i: (r.outcome, r.reason) for i, r in results.items()} == expected
    assert all(results[i].identity is None for i in refused)

    for dispatch_id in refused:
        row = before[dispatch_id]
        assert row is not None
        assert row.status is ExecutionStatus.LEASED
        await assert_untouched(harness, dispatch_id, row, events_before[dispatch_id])
    taken_over = before[taken_over_id]
    assert taken_over is not None
    assert (taken_over.lease_owner, taken_over.lease_token) == ("w2", "tok-new")
    assert await runs_of(harness, taken_over_id) == await runs_of(harness, stale_id) == 0
    assert await receipts_of(harness, taken_over_id) == await receipts_of(harness, stale_id) == 0
    # The planted effects are what they were: one Run each, and no receipt.
    assert await runs_of(harness, receipt_id) == await runs_of(harness, run_only_id) == 1
    assert await repository.get_receipt(receipt_id) is None
    assert await receipts_of(harness, run_only_id) == 0
    assert await count_where(harness, "runs", "1 = 1") == runs_before + len(good_ids)

    for dispatch_id in good_ids:
        row = await store.get_execution(dispatch_id)
        assert row is not None
        assert row.status is ExecutionStatus.SUCCEEDED
        assert await runs_of(harness, dispatch_id) == 1
        receipt = await repository.get_receipt(dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        starts = [
            e
            for e in await store.execution_events(dispatch_id)
            if e.to_status is ExecutionStatus.EXECUTING
        ]
        assert len(starts) == 1


async def _run_for(
    handler: run_create.RunCreateHandler, dispatch: records.Dispatch, clock: ManualClock
) -> runs.Run:
    inspected = await handler.inspect(dispatch)
    assert inspected.action_digest == dispatch.action_digest
    return handler.page_effect(dispatch, started_at_ms=clock.now_ms())


# -- c. the per-item savepoint fallback ------------------------------------------------------


@pytest.mark.parametrize("fault", ["shared_run_id", "priority_out_of_range"])
async def test_an_item_whose_statements_fail_is_undone_alone_and_the_rest_commit(
    harness: Harness, clock: ManualClock, fault: str
) -> None:
    store = harness.store
    repository = repositories.runs(store)
    await submit_runs(harness.approver_store, clock, 4)
    claims = await claim_page(harness, clock, 4)
    clock.advance(ms=3)
    items = await page_items(harness, clock, claims)
    bad = 2
    if fault == "shared_run_id":  # the page's insert of its Runs fails on the primary key
        changes: dict[str, Any] = {"run_id": items[0].effect.run_id}
    else:  # a CHECK constraint of runs refuses this Run
        changes = {"priority": 5000}
    items[bad] = dataclasses.replace(
        items[bad], effect=dataclasses.replace(items[bad].effect, **changes)
    )
    bad_id = items[bad].dispatch.dispatch_id
    bad_before = await store.get_execution(bad_id)
    assert bad_before is not None
    bad_events = await store.execution_events(bad_id)
    commits_before = store.commits

    results = await commit(store, clock, items)

    assert store.commits - commits_before == 1  # still one transaction, savepoints inside
    for index, item in enumerate(items):
        dispatch_id = item.dispatch.dispatch_id
        result = results[dispatch_id]
        if index == bad:
            assert (result.outcome, result.reason, result.identity) == (
                NOT_TAKEN,
                "item_failed",
                None,
            )
            continue
        assert (result.outcome, result.reason) == (COMMITTED, None)
        row = await store.get_execution(dispatch_id)
        assert row is not None
        assert row.status is ExecutionStatus.SUCCEEDED
        run = await repository.get_run_by_key(item.dispatch.project_id, dispatch_id)
        assert run == item.effect
        receipt = await repository.get_receipt(dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        assert receipt.resource_id == item.effect.run_id
        # The undone page attempt left no trace: one start, one completion.
        events = await store.execution_events(dispatch_id)
        assert [e.to_status for e in events] == [
            ExecutionStatus.PENDING,
            ExecutionStatus.LEASED,
            ExecutionStatus.EXECUTING,
            ExecutionStatus.SUCCEEDED,
        ]
        where = f"run_id = '{item.effect.run_id}'"
        assert await count_where(harness, "run_attempts", where) == 1
        assert await count_where(harness, "run_events", where) == 1
    await assert_untouched(harness, bad_id, bad_before, bad_events)
    assert bad_before.status is ExecutionStatus.LEASED
    assert await runs_of(harness, bad_id) == 0
    assert await receipts_of(harness, bad_id) == 0
    assert await count_where(harness, "runs", "1 = 1") == 3

    # Nothing was written for it: its claim's fence still starts it (the per-item path).
    (started,) = await store.start([items[bad].request], now_ms=clock.now_ms(), lease_ms=LEASE_MS)
    assert started.outcome is Outcome.STARTED


# -- d. a crash before the commit ------------------------------------------------------------


async def test_a_crash_before_the_commit_writes_nothing_and_each_item_is_taken_over(
    harness: Harness, clock: ManualClock
) -> None:
    n = 6
    consumed = await submit_runs(harness.approver_store, clock, n)
    crashing = await harness.open_another()

    def crash() -> None:
        raise SimulatedCrash("after complete_page")

    page_crash.crash_inside(crashing, after="complete_page", crash=crash)
    batch = await crashing.claim_due(now_ms=clock.now_ms(), owner="w1", limit=n, lease_ms=LEASE_MS)
    claims = list(batch.claimed)
    assert len(claims) == n
    clock.advance(ms=4)
    items = await page_items(harness, clock, claims)
    runs_before = await count_where(harness, "runs", "1 = 1")
    with pytest.raises(SimulatedCrash):
        await crashing.commit_page(
            run_create_tables.TABLES, items, now_ms=clock.now_ms(), lease_ms=LEASE_MS
        )

    for claim in claims:
        assert claim.lease is not None
        row = await harness.store.get_execution(claim.dispatch_id)
        assert row is not None
        assert (row.status, row.version, row.lease_owner, row.lease_token) == (
            ExecutionStatus.LEASED,
            claim.lease.version,
            "w1",
            claim.lease.token,
        )
        assert row.started_at_ms is None
        events = await harness.store.execution_events(claim.dispatch_id)
        assert [e.to_status for e in events] == [ExecutionStatus.PENDING, ExecutionStatus.LEASED]
        assert await runs_of(harness, claim.dispatch_id) == 0
        assert await receipts_of(harness, claim.dispatch_id) == 0
    assert await count_where(harness, "runs", "1 = 1") == runs_before
    counts = await harness.store.counts(now_ms=clock.now_ms())
    assert counts.executions[EffectiveStatus.LEASED] == n
    assert counts.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0

    clock.advance(ms=LEASE_MS + 1)
    # One crash's page is taken over whole; the dead claim's attempt is refunded.
    report = await make_dispatcher(harness.store, clock, owner="w2").dispatch_batch()
    assert report.outcomes["succeeded"] == n
    for c in consumed:
        row = await harness.store.get_execution(c.dispatch_id)
        assert row is not None
        assert (row.status, row.attempt, row.takeovers, row.lease_owner) == (
            ExecutionStatus.SUCCEEDED,
            1,
            1,
            "w2",
        )
        events = await harness.store.execution_events(c.dispatch_id)
        starts = [
            e
            for e in events
            if e.from_status is ExecutionStatus.LEASED and e.to_status is ExecutionStatus.EXECUTING
        ]
        assert len(starts) == 1
        assert starts[0].lease_owner == "w2"
        assert await runs_of(harness, c.dispatch_id) == 1
        receipt = await repositories.runs(harness.store).get_receipt(c.dispatch_id)
        assert receipt is not None
        assert receipt.is_intact()
        assert receipt.execution_attempt == 1
        assert await harness.store.get_resolution(c.dispatch_id) is None
    after = await harness.store.counts(now_ms=clock.now_ms() + 10 * LEASE_MS)
    assert after.executions[EffectiveStatus.RECOVERY_REQUIRED] == 0
    assert after.executions[EffectiveStatus.SUCCEEDED] == n


# -- the binding ------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", ["approval_request_id", "action_digest"])
async def test_an_item_whose_approval_or_digest_differs_is_not_started(
    harness: Harness, clock: ManualClock, bound: str
) -> None:
    """The start of a page item presents the approval and action digest its dispatch was
    created for, exactly as the per-item barrier does; a different one starts nothing."""
    await submit_runs(harness.approver_store, clock, 2)
    claims = await claim_page(harness, clock, 2)
    good, bad = await page_items(harness, clock, claims)
    request = (
        dataclasses.replace(bad.request, approval_request_id="a-other")
        if bound == "approval_request_id"
        else dataclasses.replace(bad.request, action_digest="0" * 64)
    )
    bad = dataclasses.replace(bad, request=request)
    bad_id = bad.dispatch.dispatch_id
    before = await harness.store.get_execution(bad_id)
    assert before is not None
    events_before = await harness.store.execution_events(bad_id)
    results = await commit(harness.store, clock, [good, bad])
    assert results[good.dispatch.dispatch_id].outcome is ports.PageOutcome.COMMITTED
    assert results[bad_id].outcome is ports.PageOutcome.NOT_TAKEN
    assert results[bad_id].reason == "start_refused"
    await assert_untouched(harness, bad_id, before, events_before)
    assert await runs_of(harness, bad_id) == 0
    assert await receipts_of(harness, bad_id) == 0
