"""PostgreSQL's two submits: one plan in one round trip, and the shared transaction.

`PostgresStore.submit_sealed` tries `fast_paths.submit_fast` (migration 0018's invoker
function `submit_one`) for one plan and runs `adapters/sql/submits.submit` for a batch or
whatever the function declined. The contract suite checks what a submit writes on both
dialects; these check which path each case takes, and that both write the same rows.
"""

from __future__ import annotations

from typing import Any

import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.domain import errors
from tests.support import pg_paths, stores, submitted_rows
from tests.support.actions import DEFAULT_TTL_MS, make_api
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres


@pytest.fixture
def paths(pg: stores.Harness, monkeypatch: pytest.MonkeyPatch) -> pg_paths.Paths:
    return pg_paths.spy(pg, monkeypatch, store=pg.approver_store)


def _plan(task: str) -> Any:
    return api.run_create_plan({"projectId": "proj-1", "taskId": task, "taskRevision": 1})


async def test_one_plan_is_one_statement_and_a_batch_the_shared_transaction(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    the_api = make_api(pg.approver_store, clock)
    (one,) = await the_api.submit([_plan("t-1")], requested_by="alice", approved_by="bob")
    assert paths.seen == ([True], 0)
    paths.clear()
    two = await the_api.submit(
        [_plan("t-2"), _plan("t-3")], requested_by="alice", approved_by="bob"
    )
    assert paths.seen == ([], 1)
    executions = await pg.raw(
        "SELECT dispatch_id, status, version FROM qinglong.approved_action_dispatch_executions "
        "ORDER BY dispatch_id"
    )
    assert executions == [
        {"dispatch_id": d, "status": "pending", "version": 0}
        for d in sorted(c.dispatch_id for c in [one, *two])
    ]


def _shape(row: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """A row with what names its own plan, request or dispatch replaced by a placeholder
    (inside the plan's JSON too), without the digests that cover those names, the serial id
    and the database-clock times (an audit row's commit, a request's database expiry)."""

    def named(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        for name, placeholder in names.items():
            value = value.replace(name, placeholder)
        return value

    return {
        k: named(v)
        for k, v in row.items()
        if k
        not in ("event_id", "committed_at_ms", "db_expires_at_ms", "plan_digest", "action_digest")
    }


async def _rows(pg: stores.Harness, names: dict[str, str]) -> list[list[dict[str, Any]]]:
    """Every row a submit wrote, per table, of the submit whose ids `names` maps."""
    found = []
    for table in submitted_rows.TABLES:
        rows = await pg.raw(f"SELECT * FROM qinglong.{table}")
        found.append([_shape(r, names) for r in rows if set(names) & set(r.values())])
    return found


async def test_both_paths_write_the_same_rows(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    the_api = make_api(pg.approver_store, clock)
    (by_statement,) = await the_api.submit([_plan("t-1")], requested_by="alice", approved_by="bob")
    assert paths.seen == ([True], 0)
    # The same one plan through the shared transaction, as the fast path falls back to it.
    new = api.new_approval(
        _plan("t-1"),
        requested_by="alice",
        now_ms=clock.now_ms(),
        approval_ttl_ms=DEFAULT_TTL_MS,
        plan_digests=pg.approver_store.plan_digests,
    )
    assert isinstance(pg.approver_store, sql_store.SqlStore)
    (by_transaction,) = await sql_store.SqlStore.submit_sealed(
        pg.approver_store, [new], approved_by="bob", now_ms=clock.now_ms(), max_attempts=5
    )
    assert paths.seen == ([True], 1)
    fast, shared = [
        await _rows(
            pg,
            {
                c.dispatch_id: "<dispatch>",
                c.approval_request_id: "<request>",
                c.action_ref: "<ref>",
            },
        )
        for c in (by_statement, by_transaction)
    ]
    assert [len(rows) for rows in fast] == [1, 1, 1, 1, 3]  # audit: created, approved, consumed
    assert fast == shared


async def test_a_declined_one_statement_submit_goes_to_the_shared_transaction_which_decides(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    # A fault the store's own statements cannot make: a trigger that silently skips the
    # approval's update, so the function's update matches nothing and it declines.
    await pg.raw(
        "CREATE FUNCTION qinglong.test_skip_approval() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN IF NEW.status = 'approved' THEN RETURN NULL; END IF; RETURN NEW; END $$"
    )
    await pg.raw(
        "CREATE TRIGGER test_skip_approval BEFORE UPDATE ON qinglong.approval_requests "
        "FOR EACH ROW EXECUTE FUNCTION qinglong.test_skip_approval()"
    )
    before = await submitted_rows.counts(pg)
    the_api = make_api(pg.approver_store, clock)
    plan = _plan("t-1")
    with pytest.raises(errors.ApprovalStateConflict) as refused:
        await the_api.submit([plan], requested_by="alice", approved_by="bob")
    assert str(refused.value).endswith("is pending, not pending")
    assert paths.seen == ([False], 1)
    assert await submitted_rows.counts(pg) == before


async def test_a_stored_plan_named_again_alone_is_refused_by_name_after_the_statement(
    pg: stores.Harness, clock: ManualClock, paths: pg_paths.Paths
) -> None:
    the_api = make_api(pg.approver_store, clock)
    stored = _plan("t-1")
    await the_api.submit([stored], requested_by="alice", approved_by="bob")
    again = api.run_create_plan(
        {"projectId": "proj-1", "taskId": "t-2", "taskRevision": 1, "actionRef": stored.action_ref}
    )
    before = await submitted_rows.counts(pg)
    paths.clear()
    with pytest.raises(errors.ApprovalStateConflict) as refused:
        await the_api.submit([again], requested_by="alice", approved_by="bob")
    assert str(refused.value) == f"action {stored.action_ref} already has a plan in project proj-1"
    assert paths.seen == ([False], 1)  # the unique key refused it; a read named the plan
    assert await submitted_rows.counts(pg) == before
