"""The store's commit counter (the bench's commits_per_dispatch) counts what the database
itself committed: checked against SQLite's data_version and PostgreSQL's transaction status."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import canonical, errors
from tests.support import faults
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher
from tests.support.stores import Harness


async def committed_by(harness: Harness, operation: Callable[[], Awaitable[object]]) -> int:
    """How many write transactions the database committed while `operation` ran."""
    if harness.dialect == "sqlite":
        assert isinstance(harness.store, sqlite_store.SqliteStore)
        path = harness.store.db.path
        observer = sqlite3.connect(path, isolation_level=None)
        try:
            # data_version moves once per commit by another connection; one op at a time here,
            # so a move means exactly one commit.
            before = observer.execute("PRAGMA data_version").fetchone()[0]
            await _run(operation)
            after = observer.execute("PRAGMA data_version").fetchone()[0]
        finally:
            observer.close()
        return 0 if after == before else 1
    first = int(
        await harness.scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
    )
    await _run(operation)
    last = int(await harness.scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"))
    # Every write transaction got an xid in [first, last); count the ones that committed
    # (the harness's own reads assign none).
    statuses = await harness.raw(
        f"SELECT pg_xact_status(x::text::xid8) AS s FROM generate_series({first}, {last - 1}) AS x"
    )
    return sum(1 for row in statuses if row["s"] == "committed")


async def counted(
    harness: Harness,
    used: ports.Store,
    operation: Callable[[], Awaitable[object]],
    prepare: Callable[[], Awaitable[object]] | None = None,
) -> tuple[int, int]:
    """(the store's count, the database's) of one run of `operation`. PostgreSQL's count takes
    in every transaction of the shared server, so a run that another session's commit inflated
    is measured again (at most forty runs: the suite's other workers write on the same server);
    an inflated count is never below the true one, so a store that counts more than the
    database still fails at once, and one that counts less fails after the last run.
    `prepare` runs before each measurement, unmeasured, so that a run measured again does the
    same work as the first (a dispatch measured again needs a row of its own to pass)."""
    for _ in range(40):
        if prepare is not None:
            await prepare()
        before = used.commits
        committed = await committed_by(harness, operation)
        mine = used.commits - before
        if harness.dialect != "postgres" or committed <= mine:
            break
    return mine, committed


async def _run(operation: Callable[[], Awaitable[object]]) -> None:
    with contextlib.suppress(errors.StoreError):  # a refused write is part of what we count
        await operation()


async def test_the_commit_counter_matches_the_database(
    harness: Harness, clock: ManualClock
) -> None:
    store = harness.store
    # Seeding approves, which the runtime login may not: the approver's pool counts its own.
    approver = harness.approver_store
    the_api = make_api(approver, clock)

    async def submit() -> object:
        return await submit_runs(approver, clock, 2)

    async def read_only() -> object:
        return await store.counts(now_ms=clock.now_ms())

    async def dispatch_one() -> object:
        return await make_dispatcher(store, clock, page_size=1).dispatch_batch()

    for used, operation in ((approver, submit), (store, read_only), (approver, submit)):
        mine, committed = await counted(harness, used, operation)
        assert mine == committed

    async def one_more_due() -> object:
        return await submit_runs(approver, clock, 1)

    mine, committed = await counted(harness, store, dispatch_one, prepare=one_more_due)
    # One passage: claim, start, effect and completion in one transaction (decision 0055).
    assert mine == committed == 1

    # A write that fails commits nothing and counts nothing.
    plan = api.run_create_plan({"projectId": "proj-1", "taskId": "t-x", "taskRevision": 1})
    approval = await the_api.create_approval(
        "run.create", canonical.dumps(plan.to_canonical_dict()), requested_by="alice"
    )
    await the_api.approve(approval.approval_request_id, decided_by="bob")
    await faults.fail_inserts_into(harness, "approved_action_dispatch_executions")
    before = approver.commits

    async def failing_consume() -> object:
        return await the_api.consume(approval.approval_request_id)

    assert await counted(harness, approver, failing_consume) == (0, 0)
    assert approver.commits == before


@pytest.mark.parametrize("pages", [1, 3])
async def test_a_drain_counts_one_passage_a_page(
    harness: Harness, clock: ManualClock, pages: int
) -> None:
    await submit_runs(harness.approver_store, clock, pages)
    the_dispatcher = make_dispatcher(harness.store, clock, page_size=1)
    for _ in range(pages):
        before = harness.store.commits
        report = await the_dispatcher.dispatch_batch()
        assert report.outcomes["succeeded"] == 1
        # The passage (claim, start, the run.create effect, completion); a full one puts off
        # the claim of other actions' rows.
        assert harness.store.commits - before == 1
