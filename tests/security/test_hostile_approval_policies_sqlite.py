"""Approval policies and votes on an edge file, by a plain `sqlite3` connection.

SQLite has no session identity: the store names each vote's principal (the OS user or a token
principal) and group membership is the file's `approval_group_members`. The file's triggers
hold the rest as PostgreSQL does (tests/security/test_hostile_approval_policies.py): one vote
per principal, no vote by the requester, none from outside the policy's groups, none on an
expired or decided request, a request's policy the one in force, never rewritten. Each test
asserts the trigger's own abort and that nothing changed.
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

_POLICY = (
    "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
    "approver_groups, written_by) VALUES ('{name}', {version}, 'run.create', {n}, "
    "'{groups}', 'owner')"
)


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        await harness.raw(_POLICY.format(name="two", version=1, n=2, groups='["ops"]'))
        await harness.raw(
            "INSERT INTO approval_group_members (group_name, principal) "
            "VALUES ('ops', 'alice'), ('ops', 'bob')"
        )
        yield harness


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the file's clock must see these lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _requested(h: stores.Harness, now: ManualClock, ref: str, *, ttl_ms: int = 0) -> str:
    client = make_api(h.approver_store, now)
    if ttl_ms:
        client = api.Api(h.approver_store, now, api.Policy(approval_ttl_ms=ttl_ms, max_attempts=5))
    created = await client.create_approval("run.create", _plan(ref), requested_by="req")
    return created.approval_request_id


def _vote(request: str, principal: str, vote: str = "approve") -> str:
    return (
        "INSERT INTO approval_votes (approval_request_id, principal, vote) "
        f"VALUES ('{request}', '{principal}', '{vote}')"
    )


async def _snapshot(h: stores.Harness, request: str) -> tuple[Any, ...]:
    where = f"WHERE approval_request_id = '{request}'"
    return (
        await h.raw(f"SELECT * FROM approval_requests {where}"),
        await h.raw(f"SELECT * FROM approval_votes {where} ORDER BY principal"),
        await h.raw(f"SELECT * FROM approval_request_policies {where}"),
        await h.raw("SELECT * FROM security_audit_events ORDER BY event_id"),
        await h.raw("SELECT * FROM approval_policies ORDER BY name, version"),
    )


async def test_a_quorum_of_two_decides_and_nobody_votes_twice(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-quorum")
    await edge.raw(_vote(request, "alice"))
    before = await _snapshot(edge, request)
    assert before[0][0]["status"] == "pending"
    assert [(p["policy_name"], p["approvals_required"]) for p in before[2]] == [("two", 2)]
    message = await refusals.sqlite_abort(edge, _vote(request, "alice", "deny"))
    assert "UNIQUE constraint failed" in message
    assert await _snapshot(edge, request) == before
    await edge.raw(_vote(request, "bob"))
    (row,) = await edge.raw(
        f"SELECT * FROM approval_requests WHERE approval_request_id = '{request}'"
    )
    assert (row["status"], row["decided_principal"]) == ("approved", "bob")


async def test_the_requester_and_a_principal_outside_the_groups_may_not_vote(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-outsiders")
    (row,) = await edge.raw(
        f"SELECT * FROM approval_requests WHERE approval_request_id = '{request}'"
    )
    requester = row["requested_principal"]
    await edge.raw(
        f"INSERT INTO approval_group_members (group_name, principal) VALUES ('ops', '{requester}')"
    )
    before = await _snapshot(edge, request)
    message = await refusals.sqlite_abort(edge, _vote(request, requester))
    assert "the requester may not vote" in message
    assert await _snapshot(edge, request) == before
    message = await refusals.sqlite_abort(edge, _vote(request, "carol"))
    assert "none of the policy's groups" in message
    assert await _snapshot(edge, request) == before


async def test_a_vote_on_an_expired_or_decided_request_is_refused(
    edge: stores.Harness, now: ManualClock
) -> None:
    timed_out = await _requested(edge, now, "act-short", ttl_ms=20)
    await anyio.sleep(0.1)
    before = await _snapshot(edge, timed_out)
    assert "approval_expired" in await refusals.sqlite_abort(edge, _vote(timed_out, "alice"))
    assert await _snapshot(edge, timed_out) == before
    decided = await _requested(edge, now, "act-denied")
    await edge.raw(_vote(decided, "alice", "deny"))
    before = await _snapshot(edge, decided)
    assert before[0][0]["status"] == "rejected"
    assert "takes no votes" in await refusals.sqlite_abort(edge, _vote(decided, "bob"))
    assert await _snapshot(edge, decided) == before


async def test_a_request_carries_the_policy_in_force_and_approving_directly_is_one_vote(
    edge: stores.Harness, now: ManualClock
) -> None:
    request = await _requested(edge, now, "act-copy")
    before = await _snapshot(edge, request)
    for statement, refusal in (
        ("UPDATE approval_request_policies SET approvals_required = 1", "never changes"),
        (
            "INSERT INTO approval_request_policies VALUES "
            f"('{request}', 'two', 1, 1, 1, '[\"ops\"]', 0, NULL, NULL, NULL)",
            "carries the policy in force",
        ),
        ("UPDATE approval_policies SET approvals_required = 1", "never changes"),
        (_POLICY.format(name="two", version=3, n=1, groups="[]"), "one after another"),
        (
            "UPDATE approval_requests SET status = 'approved', version = 2, "
            f"decided_by = 'alice', decided_principal = 'alice' "
            f"WHERE approval_request_id = '{request}'",
            "needs more approvals",
        ),
    ):
        assert refusal in await refusals.sqlite_abort(edge, statement), statement
        assert await _snapshot(edge, request) == before, statement
    # A new version is audited and never re-decides a waiting request.
    await edge.raw(_POLICY.format(name="two", version=2, n=1, groups="[]"))
    after = await _snapshot(edge, request)
    assert after[:3] == before[:3]
    kinds = [(e["kind"], e["subject_id"], e["detail_code"]) for e in after[3]][-1:]
    assert kinds == [("approval.policy_set", "two", "2")]
