"""Approval policies and votes against plain logins (PostgreSQL).

A policy asks for N approvals from named groups; the database copies it into each request and
counts the votes. Each attack runs as a login holding only its documented role and asserts the
database's SQLSTATE and that nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import asyncpg
import pytest

from qinglong_dispatcher import api
from tests.support import refusals, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

GROUP = f"ops_{stores.session_login('grp').removeprefix('qlt_')}"
GROUP_ROLE = f"{stores.INSTALLATION}_g_{GROUP}"
VOTER = stores.session_login("voter")
"""In `qinglong_approver` and the group: the second approver of a quorum."""
OUTSIDER = stores.session_login("outsider")
"""In `qinglong_approver`, not in the group."""

_VOTE = (
    "INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote, reason) "
    "VALUES ($1, session_user, $2, 'looked at it')"
)
_POLICY = (
    "INSERT INTO qinglong.approval_policies "
    "(name, version, action_type, approvals_required, approver_groups) "
    "VALUES ('{name}', 1, 'run.create', {n}, '{{{groups}}}')"
)


def _login(name: str, *roles: str) -> str:
    grants = "".join(f"GRANT {role} TO {name};" for role in roles)
    return f"""
DO $login$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{name}') THEN
        CREATE ROLE {name} LOGIN PASSWORD '{stores.LOGIN_PASSWORD}';
    END IF;
    {grants}
END
$login$"""


@pytest.fixture
async def groups() -> AsyncIterator[None]:
    """The group role, granted to both approver logins and to the requester (so that only the
    requester rule can refuse it), and two more approver logins."""
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        await conn.execute(f"DROP ROLE IF EXISTS {GROUP_ROLE}")
        await conn.execute(f"CREATE ROLE {GROUP_ROLE} NOLOGIN")
        await conn.execute(_login(VOTER, "qinglong_approver", GROUP_ROLE))
        await conn.execute(_login(OUTSIDER, "qinglong_approver"))
        await conn.execute(f"GRANT {GROUP_ROLE} TO {stores.STRICT_APPROVER_LOGIN}")
        await conn.execute(f"GRANT {GROUP_ROLE} TO {stores.APPROVER_LOGIN}")
    finally:
        await conn.close()
    try:
        yield
    finally:
        await stores.drop_roles(GROUP_ROLE)


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _as(url: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def _snapshot(pg: stores.Harness, approval_request_id: str) -> tuple[Any, ...]:
    where = f"WHERE approval_request_id = '{approval_request_id}'"
    request = await pg.raw(f"SELECT * FROM qinglong.approval_requests {where}")
    votes = await pg.raw(f"SELECT * FROM qinglong.approval_votes {where} ORDER BY principal")
    policy = await pg.raw(f"SELECT * FROM qinglong.approval_request_policies {where}")
    audit = await pg.raw(
        "SELECT count(*) AS n FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{approval_request_id}'"
    )
    return dict(request[0]), [dict(v) for v in votes], [dict(p) for p in policy], audit[0]["n"]


async def _requested(pg: stores.Harness, now: ManualClock, ref: str, *, ttl_ms: int = 0) -> str:
    """A request by the approver login (`APPROVER_LOGIN`) under the policy in force."""
    client = make_api(pg.approver_store, now)
    if ttl_ms:
        policy = api.Policy(approval_ttl_ms=ttl_ms, max_attempts=5)
        client = api.Api(pg.approver_store, now, policy)
    created = await client.create_approval("run.create", _plan(ref), requested_by="alice")
    return created.approval_request_id


async def _urls(pg: stores.Harness) -> tuple[str, str, str, str]:
    database = str(await pg.scalar("SELECT current_database()"))
    return (
        stores.strict_approver_url(database),
        stores.pg_url(database, login=VOTER),
        stores.pg_url(database, login=OUTSIDER),
        stores.approver_url(database),
    )


async def test_a_quorum_of_two_distinct_principals_decides_and_nobody_votes_twice(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    request = await _requested(pg, now, "act-quorum")
    strict, voter, _, _ = await _urls(pg)
    copied = (await _snapshot(pg, request))[2]
    assert [(p["policy_name"], p["approvals_required"]) for p in copied] == [("two", 2)]
    await _as(strict, _VOTE, request, "approve")
    before = await _snapshot(pg, request)
    assert before[0]["status"] == "pending"
    for vote in ("approve", "deny"):
        assert await refusals.sqlstate_as(strict, _VOTE, request, vote) == "23505"
        assert await _snapshot(pg, request) == before
    await _as(voter, _VOTE, request, "approve")
    after = await _snapshot(pg, request)
    assert (after[0]["status"], after[0]["decided_principal"]) == ("approved", VOTER)
    assert [v["principal"] for v in after[1]] == sorted([stores.STRICT_APPROVER_LOGIN, VOTER])


async def test_approving_directly_is_one_vote_and_falls_short_of_a_quorum(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    request = await _requested(pg, now, "act-direct")
    strict, _, _, _ = await _urls(pg)
    approve = (
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        "decided_by = 'bob', decided_principal = session_user WHERE approval_request_id = $1"
    )
    before = await _snapshot(pg, request)
    assert await refusals.sqlstate_as(strict, approve, request) == "QLA03"
    assert await _snapshot(pg, request) == before


async def test_the_requester_and_a_principal_outside_the_groups_may_not_vote(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    request = await _requested(pg, now, "act-outsiders")
    _, _, outsider, requester = await _urls(pg)
    before = await _snapshot(pg, request)
    # The requester is an approver, a self-approver and in the group: only its being the
    # requester refuses it.
    assert await refusals.sqlstate_as(requester, _VOTE, request, "approve") == "QLA02"
    assert await _snapshot(pg, request) == before
    assert await refusals.sqlstate_as(outsider, _VOTE, request, "approve") == "QLA01"
    assert await _snapshot(pg, request) == before


async def test_nobody_votes_as_another_principal(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    request = await _requested(pg, now, "act-impersonate")
    strict, _, _, _ = await _urls(pg)
    forged = (
        "INSERT INTO qinglong.approval_votes (approval_request_id, principal, vote) "
        f"VALUES ($1, '{VOTER}', 'approve')"
    )
    before = await _snapshot(pg, request)
    assert await refusals.sqlstate_as(strict, forged, request) == "QLA01"
    assert await _snapshot(pg, request) == before


async def test_a_vote_on_an_expired_or_decided_request_is_refused(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    timed_out = await _requested(pg, now, "act-short", ttl_ms=20)
    await anyio.sleep(0.1)
    strict, voter, outsider, _ = await _urls(pg)
    before = await _snapshot(pg, timed_out)
    assert await refusals.sqlstate_as(strict, _VOTE, timed_out, "approve") == "QLA04"
    assert await _snapshot(pg, timed_out) == before
    # One denial (the policy's default threshold) rejects; the request takes no more votes.
    decided = await _requested(pg, now, "act-denied")
    await _as(strict, _VOTE, decided, "deny")
    before = await _snapshot(pg, decided)
    assert before[0]["status"] == "rejected"
    assert await refusals.sqlstate_as(voter, _VOTE, decided, "approve") == "QLA03"
    assert await _snapshot(pg, decided) == before
    assert outsider  # outside the groups too, but the decision refuses first


async def test_only_the_owner_writes_a_policy_and_nobody_writes_a_requests_copy(
    pg: stores.Harness, now: ManualClock, groups: None
) -> None:
    database = str(await pg.scalar("SELECT current_database()"))
    await pg.raw(_POLICY.format(name="two", n=2, groups=GROUP))
    request = await _requested(pg, now, "act-copy")
    policies = "SELECT count(*) AS n FROM qinglong.approval_policies"
    count = (await pg.raw(policies))[0]["n"]
    before = await _snapshot(pg, request)
    weaker = _POLICY.format(name="one", n=1, groups="")
    rewrite = (
        "UPDATE qinglong.approval_request_policies SET approvals_required = 1 "
        "WHERE approval_request_id = $1"
    )
    forged = (
        "INSERT INTO qinglong.approval_request_policies (approval_request_id, policy_name, "
        "policy_version, approvals_required, denials_to_reject, approver_groups, "
        "reason_required) VALUES ($1, 'two', 1, 1, 1, '{}', false)"
    )
    drop = "DELETE FROM qinglong.approval_request_policies WHERE approval_request_id = $1"
    for login in (
        stores.runtime_url(database),
        stores.operator_url(database),
        stores.approver_url(database),
        stores.strict_approver_url(database),
    ):
        assert await refusals.sqlstate_as(login, weaker) == "42501", login
        assert await refusals.sqlstate_as(login, rewrite, request) == "42501", login
        assert await refusals.sqlstate_as(login, forged, request) == "42501", login
        assert await refusals.sqlstate_as(login, drop, request) == "42501", login
        assert (await pg.raw(policies))[0]["n"] == count
        assert await _snapshot(pg, request) == before
    # Even the owner's change is a new version, which never re-decides a waiting request.
    await pg.raw(_POLICY.format(name="two", n=1, groups=""))
    assert await _snapshot(pg, request) == before
    audit = await pg.raw(
        "SELECT kind, detail_code FROM qinglong.security_audit_events "
        "WHERE subject_id = 'two' ORDER BY event_id"
    )
    assert [(a["kind"], a["detail_code"]) for a in audit] == [
        ("approval.policy_set", "1"),
        ("approval.policy_set", "2"),
    ]
