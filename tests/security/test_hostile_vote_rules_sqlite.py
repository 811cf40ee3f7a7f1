"""The rules of one vote on an edge file, by a plain `sqlite3` connection (migration 0028 checks
a vote in one read and decides it in one statement): a vote without the reason its policy asks
for, or with a time that is not the file's, is refused and changes nothing; the denials
reject only once they reach the policy's number, and an approval never counts as one; the
deciding vote's `decided_by` label is what the request records; a vote is deleted only with its
request, by a prune.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from qinglong_dispatcher import api
from tests.support import refusals, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock
from tests.support.dispatching import make_dispatcher


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    """A policy of 2 approvals and 2 denials, asking every vote for a reason."""
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        await harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required,"
            " denials_to_reject, reason_required, written_by)"
            " VALUES ('careful', 1, 'run.create', 2, 2, 1, 'owner')"
        )
        yield harness


@pytest.fixture
def now() -> ManualClock:
    return ManualClock(int(time.time() * 1000))


async def _requested(h: stores.Harness, now: ManualClock, ref: str) -> str:
    plan = api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()
    created = await make_api(h.approver_store, now).create_approval(
        "run.create", plan, requested_by="req"
    )
    return created.approval_request_id


def _vote(request: str, principal: str, vote: str, reason: str | None, **extra: Any) -> str:
    columns = ["approval_request_id", "principal", "vote", "reason", *extra]
    values = [request, principal, vote, reason, *extra.values()]
    shown = ", ".join("NULL" if v is None else repr(v) for v in values)
    return f"INSERT INTO approval_votes ({', '.join(columns)}) VALUES ({shown})"


async def _snapshot(h: stores.Harness, request: str) -> tuple[Any, ...]:
    where = f"WHERE approval_request_id = '{request}'"
    return (
        await h.raw(f"SELECT * FROM approval_requests {where}"),
        await h.raw(f"SELECT * FROM approval_votes {where} ORDER BY principal"),
        await h.raw("SELECT * FROM security_audit_events ORDER BY event_id"),
    )


async def test_a_vote_without_its_reason_or_the_files_time_is_refused(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-reason")
    before = await _snapshot(edge, request)
    for reason in (None, "   "):
        message = await refusals.sqlite_abort(edge, _vote(request, "alice", "approve", reason))
        assert "asks every vote for a reason" in message
        assert await _snapshot(edge, request) == before
    forged = _vote(request, "alice", "approve", "looked", voted_at_ms=1)
    assert "the database's time" in await refusals.sqlite_abort(edge, forged)
    assert await _snapshot(edge, request) == before
    await edge.raw(_vote(request, "alice", "approve", "looked at it"))
    (vote,) = (await _snapshot(edge, request))[1]
    assert (vote["principal"], vote["reason"]) == ("alice", "looked at it")


async def test_denials_reject_at_the_policys_number_and_approvals_are_not_denials(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-deny")
    await edge.raw(_vote(request, "alice", "deny", "wrong target"))
    await edge.raw(_vote(request, "bob", "approve", "fine by me"))
    (row,) = (await _snapshot(edge, request))[0]
    assert row["status"] == "pending"
    long_label = _vote(request, "carol", "deny", "no", decided_by="x" * 201)
    assert "CHECK constraint failed" in await refusals.sqlite_abort(edge, long_label)
    await edge.raw(_vote(request, "carol", "deny", "no", decided_by="carol-on-call"))
    (row,) = (await _snapshot(edge, request))[0]
    assert (row["status"], row["decided_by"], row["decided_principal"]) == (
        "rejected",
        "carol-on-call",
        "carol",
    )


async def test_the_second_approval_approves_and_records_the_principal_without_a_label(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-approve")
    await edge.raw(_vote(request, "alice", "approve", "ok"))
    await edge.raw(_vote(request, "bob", "deny", "not sure"))
    assert (await _snapshot(edge, request))[0][0]["status"] == "pending"
    await edge.raw(_vote(request, "carol", "approve", "ok"))
    (row,) = (await _snapshot(edge, request))[0]
    assert (row["status"], row["decided_by"], row["decided_principal"]) == (
        "approved",
        "carol",
        "carol",
    )


async def test_a_vote_is_deleted_only_with_its_request_by_a_prune(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-kept")
    await edge.raw(_vote(request, "alice", "deny", "wrong target"))
    before = await _snapshot(edge, request)
    delete = f"DELETE FROM approval_votes WHERE approval_request_id = '{request}'"
    assert "only a prune deletes a vote" in await refusals.sqlite_abort(edge, delete)
    assert await _snapshot(edge, request) == before
    # The prune still takes a voted request's whole tree: its votes go with it.
    await edge.raw(_vote(request, "bob", "approve", "fine"))
    await edge.raw(_vote(request, "carol", "approve", "fine"))
    consumed = await make_api(edge.approver_store, now).consume(request)
    report = await make_dispatcher(edge.store, now).dispatch_batch()
    assert report.outcomes["succeeded"] == 1
    # A later tree holds the newest ledger line, which a prune keeps.
    later = await _requested(edge, now, "act-later")
    for voter in ("bob", "carol"):
        await edge.raw(_vote(later, voter, "approve", "fine"))
    await make_api(edge.approver_store, now).consume(later)
    await make_dispatcher(edge.store, now).dispatch_batch()
    assert edge.pruner_store is not None
    # Both trees finished at the test clock's time; the cutoff just after it is already past
    # by the file's clock, as a prune's must be.
    await anyio.sleep(0.05)
    pruned = await edge.pruner_store.prune_batch(
        cutoff_ms=now.now_ms() + 1, audit_cutoff_ms=0, limit=10
    )
    assert pruned.dispatches == 1
    assert (
        await edge.raw(f"SELECT * FROM approval_votes WHERE approval_request_id = '{request}'")
        == []
    )
    assert consumed.approval_request_id == request
