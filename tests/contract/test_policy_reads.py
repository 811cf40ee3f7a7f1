"""What a reader sees of a request's policy and votes, both dialects: the policy copied into
the request, the votes so far, who else may vote (the group members who have not voted, the
requester left out), the expiry by the database's clock; the policies in force; the waiting
requests by policy."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import approvals, policies
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

GROUP = f"ops_{stores.session_login('rgrp').removeprefix('qlt_')}"
GROUP_ROLE = f"{stores.INSTALLATION}_g_{GROUP}"
VOTER = stores.session_login("rvoter")
"""PostgreSQL: an approver login in the group who has not voted."""


@pytest.fixture
async def grouped(harness: stores.Harness) -> AsyncIterator[tuple[stores.Harness, str, str]]:
    """The harness with policy `two` (2 approvals from GROUP, a reason each) and an older,
    retired one; (harness, the first voter, the one still to vote). The requester (the
    approver store's principal) is in the group too, so only the requester rule leaves it out."""
    if harness.dialect == "sqlite":
        await harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "approver_groups, reason_required, written_by) VALUES "
            f"('two', 1, 'run.create', 2, '[\"{GROUP}\"]', 1, 'owner')"
        )
        await harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "written_by) VALUES ('gone', 1, 'tool.invoke', 1, 'owner'), "
            "('gone', 2, 'tool.invoke', 1, 'owner')"
        )
        await harness.raw(
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            "retired, written_by) VALUES ('gone', 3, 'tool.invoke', 1, 1, 'owner')"
        )
        requester = (await _request(harness)).requested_principal
        await harness.raw(
            "INSERT INTO approval_group_members (group_name, principal) VALUES "
            f"('{GROUP}', 'alice'), ('{GROUP}', 'bob'), ('{GROUP}', '{requester}')"
        )
        yield harness, "alice", "bob"
        return
    admin = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        await admin.execute(f"DROP ROLE IF EXISTS {GROUP_ROLE}")
        await admin.execute(f"CREATE ROLE {GROUP_ROLE} NOLOGIN")
        await stores.create_login(VOTER, "qinglong_approver", GROUP_ROLE)
        await admin.execute(f"GRANT {GROUP_ROLE} TO {stores.STRICT_APPROVER_LOGIN}")
        await admin.execute(f"GRANT {GROUP_ROLE} TO {stores.APPROVER_LOGIN}")
    finally:
        await admin.close()
    await harness.raw(
        "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
        f"approver_groups, reason_required) VALUES ('two', 'run.create', 2, '{{{GROUP}}}', true)"
    )
    for retired in ("false", "false", "true"):
        await harness.raw(
            "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
            f"retired) VALUES ('gone', 'tool.invoke', 1, {retired})"
        )
    try:
        yield harness, stores.STRICT_APPROVER_LOGIN, VOTER
    finally:
        await stores.drop_roles(GROUP_ROLE)


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _request(h: stores.Harness, ref: str = "act-0") -> approvals.Approval:
    clock = ManualClock(int(time.time() * 1000))
    return await make_api(h.approver_store, clock).create_approval(
        "run.create", _plan(ref), requested_by="alice"
    )


async def _vote(h: stores.Harness, request: str, principal: str, vote: str) -> None:
    if h.dialect == "sqlite":
        await h.raw(
            "INSERT INTO approval_votes (approval_request_id, principal, vote, reason) "
            f"VALUES ('{request}', '{principal}', '{vote}', 'looked at it')"
        )
        return
    database = str(await h.scalar("SELECT current_database()"))
    conn = await asyncpg.connect(stores.pg_url(database, login=principal), timeout=5)
    try:
        await conn.execute(
            "INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote, reason) "
            "VALUES ($1, session_user, $2, 'looked at it')",
            request,
            vote,
        )
    finally:
        await conn.close()


async def test_a_request_shows_its_policy_votes_remaining_voters_and_expiry(
    grouped: tuple[stores.Harness, str, str],
) -> None:
    h, first, second = grouped
    created = await _request(h, "act-1")
    request = created.approval_request_id
    state = await h.store.vote_state(request)
    assert state is not None
    assert state.policy == policies.RequestPolicy(
        name="two",
        version=1,
        approvals_required=2,
        denials_to_reject=1,
        approver_groups=(GROUP,),
        reason_required=True,
    )
    assert state.votes == ()
    assert state.may_vote is not None
    assert created.requested_principal not in state.may_vote
    assert {first, second} <= set(state.may_vote)
    assert abs(state.expires_at_ms - created.expires_at_ms) < 5_000

    await _vote(h, request, first, "approve")
    state = await h.store.vote_state(request)
    assert state is not None
    assert [(v.principal, v.vote, v.reason) for v in state.votes] == [
        (first, approvals.Vote.APPROVE, "looked at it")
    ]
    assert abs(state.votes[0].voted_at_ms - time.time() * 1000) < 60_000
    assert state.may_vote is not None
    assert first not in state.may_vote
    assert second in state.may_vote
    shown = state.as_dict(now_ms=state.expires_at_ms - 1000)
    assert (shown["approvals"], shown["denials"], shown["expires_in_ms"]) == (1, 0, 1000)

    await _vote(h, request, second, "approve")
    state = await h.store.vote_state(request)
    assert state is not None
    assert state.may_vote == ()
    decided = await h.store.get_approval(request)
    assert decided is not None
    assert decided.status is approvals.ApprovalStatus.APPROVED


async def test_the_policies_in_force_and_the_waiting_requests_by_policy(
    grouped: tuple[stores.Harness, str, str],
) -> None:
    h, _, _ = grouped
    in_force = await h.store.policies_in_force()
    assert [(p.name, p.version, p.approvals_required, p.approver_groups) for p in in_force] == [
        ("two", 1, 2, (GROUP,))
    ]
    assert in_force[0].reason_required
    assert in_force[0].project_id is None
    before = (await h.store.waiting_by_policy()).get("two", 0)
    await _request(h, "act-2")
    assert await h.store.waiting_by_policy() == {"two": before + 1}


async def test_a_request_without_a_policy_or_id_shows_so(harness: stores.Harness) -> None:
    created = await _request(harness, "act-3")
    state = await harness.store.vote_state(created.approval_request_id)
    assert state is not None
    assert (state.policy, state.votes, state.may_vote) == (None, (), None)
    assert await harness.store.vote_state("apr_missing") is None
    assert await harness.store.waiting_by_policy() == {"": 1}
    assert await harness.store.policies_in_force() == []
