"""PostgreSQL decides who approves: `qinglong_approver`, separation of duties with
`qinglong_self_approver`, and no dispatch without its consumed approval — for the store and
for direct SQL sessions alike."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import approvals, errors
from tests.contract.test_approvals import plan_bytes
from tests.support import stores
from tests.support.actions import make_api, submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

Status = approvals.ApprovalStatus


@pytest.fixture
async def database() -> AsyncIterator[str]:
    async with stores.fresh_database() as name:
        yield name


@pytest.fixture
async def logins(database: str) -> AsyncIterator[dict[str, postgres_store.PostgresStore]]:
    """One pool per login of the test server, on the same database."""
    urls = {
        "runtime": stores.runtime_url(database),
        "approver": stores.approver_url(database),
        "strict": stores.strict_approver_url(database),
        "operator": stores.operator_url(database),
    }
    opened: dict[str, postgres_store.PostgresStore] = {}
    try:
        for name, url in urls.items():
            opened[name] = await stores.open_postgres(url, max_size=1)
        yield opened
    finally:
        for each in opened.values():
            await each.close()


async def _pending(store: postgres_store.PostgresStore, clock: ManualClock, ref: str) -> str:
    created = await make_api(store, clock).create_approval(
        "run.create", plan_bytes(actionRef=ref), requested_by="alice"
    )
    return created.approval_request_id


async def _counts(database: str) -> dict[str, int]:
    (row,) = await stores.raw(
        database,
        "SELECT (SELECT count(*) FROM qinglong.action_plans) AS plans, "
        "(SELECT count(*) FROM qinglong.approval_requests) AS approvals, "
        "(SELECT count(*) FROM qinglong.approved_action_dispatches) AS dispatches, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit",
    )
    return dict(row)


async def test_the_runtime_login_may_create_and_consume_but_never_approve(
    database: str, logins: dict[str, postgres_store.PostgresStore], clock: ManualClock
) -> None:
    runtime = logins["runtime"]
    approval_id = await _pending(runtime, clock, "act-1")
    with pytest.raises(errors.ApprovalNotPermitted):
        await make_api(runtime, clock).approve(approval_id, decided_by="bob")
    url = stores.runtime_url(database)
    where = f"WHERE approval_request_id = '{approval_id}'"
    # Direct SQL: even naming itself as the decider, the login is no approver (QLA01).
    with pytest.raises(asyncpg.PostgresError) as caught:
        await stores.as_login(
            url,
            "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
            f"decided_by = 'bob', decided_principal = session_user {where}",
        )
    assert caught.value.sqlstate == "QLA01"
    with pytest.raises(asyncpg.PostgresError):
        await stores.as_login(
            url,
            "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
            f"decided_by = 'bob', decided_principal = '{stores.APPROVER_LOGIN}' {where}",
        )
    # …nor may it insert a request that is already approved (QLA03).
    with pytest.raises(asyncpg.PostgresError) as caught:
        await stores.as_login(
            url,
            "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, "
            "action_type, action_ref, action_digest, status, version, requested_by, decided_by, "
            "requested_principal, decided_principal, expires_at_ms, created_at_ms, "
            "updated_at_ms) SELECT 'a-forged', project_id, action_type, action_ref, "
            "action_digest, 'approved', 2, 'alice', 'bob', session_user, session_user, "
            "expires_at_ms, created_at_ms, updated_at_ms FROM qinglong.approval_requests "
            f"{where}",
        )
    assert caught.value.sqlstate == "QLA03"
    # `submit` approves, so as the runtime login it is refused whole: nothing written.
    before = await _counts(database)
    with pytest.raises(errors.ApprovalNotPermitted):
        await submit_runs(runtime, clock, 2)
    assert await _counts(database) == before
    stored = await runtime.get_approval(approval_id)
    assert stored is not None
    assert stored.status is Status.PENDING
    # Approved by an approver, the runtime consumes it (the daemon-side path).
    await make_api(logins["approver"], clock).approve(approval_id, decided_by="bob")
    consumed = await make_api(runtime, clock).consume(approval_id)
    dispatch = await runtime.get_dispatch(consumed.dispatch_id)
    assert dispatch is not None
    assert dispatch.approved_by == "bob"


async def test_the_runtime_login_cannot_insert_a_dispatch_for_an_unconsumed_approval(
    database: str, logins: dict[str, postgres_store.PostgresStore], clock: ManualClock
) -> None:
    runtime = logins["runtime"]
    pending_id = await _pending(runtime, clock, "act-pending")
    approved_id = await _pending(runtime, clock, "act-approved")
    await make_api(logins["approver"], clock).approve(approved_id, decided_by="bob")
    (other,) = await submit_runs(logins["approver"], clock, 1)
    url = stores.runtime_url(database)

    def forged(approval_id: str, *, approved_by: str = "bob") -> str:
        return (
            "INSERT INTO qinglong.approved_action_dispatches (dispatch_id, approval_request_id, "
            "project_id, action_type, action_ref, action_digest, approved_by, created_at_ms) "
            f"SELECT 'd-forged', approval_request_id, project_id, action_type, action_ref, "
            f"action_digest, '{approved_by}', 1 FROM qinglong.approval_requests "
            f"WHERE approval_request_id = '{approval_id}'"
        )

    for statement in (
        forged(pending_id),
        forged(approved_id),  # approved, but nobody consumed it
        forged(other.approval_request_id, approved_by="mallory"),  # another login, label
    ):
        with pytest.raises(asyncpg.PostgresError) as caught:
            await stores.as_login(url, statement)
        assert caught.value.sqlstate == "QLA03", statement
    (row,) = await stores.raw(
        database, "SELECT count(*) AS n FROM qinglong.approved_action_dispatches"
    )
    assert row["n"] == 1


async def test_separation_of_duties_unless_granted_qinglong_self_approver(
    database: str, logins: dict[str, postgres_store.PostgresStore], clock: ManualClock
) -> None:
    strict = logins["strict"]
    own = await _pending(strict, clock, "act-own")
    with pytest.raises(errors.SelfApprovalRefused):
        await make_api(strict, clock).approve(own, decided_by="carol")
    with pytest.raises(asyncpg.PostgresError) as caught:
        await stores.as_login(
            stores.strict_approver_url(database),
            "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
            "decided_by = 'carol', decided_principal = session_user "
            f"WHERE approval_request_id = '{own}'",
        )
    assert caught.value.sqlstate == "QLA02"
    # Nor may it record another login as the decider (or requester) to get round the rule.
    for forged in (
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        f"decided_by = 'carol', decided_principal = '{stores.APPROVER_LOGIN}' "
        f"WHERE approval_request_id = '{own}'",
        "UPDATE qinglong.approval_requests SET requested_principal = 'someone-else' "
        f"WHERE approval_request_id = '{own}'",
    ):
        with pytest.raises(asyncpg.PostgresError) as caught:
            await stores.as_login(stores.strict_approver_url(database), forged)
        assert caught.value.sqlstate in ("QLA01", "QLA03"), forged
    before = await _counts(database)
    with pytest.raises(errors.SelfApprovalRefused):
        await submit_runs(strict, clock, 1)
    assert await _counts(database) == before
    # Another approver may approve it; the strict approver may approve another's request.
    approved = await make_api(logins["approver"], clock).approve(own, decided_by="bob")
    assert (approved.requested_principal, approved.decided_principal) == (
        stores.STRICT_APPROVER_LOGIN,
        stores.APPROVER_LOGIN,
    )
    theirs = await _pending(logins["runtime"], clock, "act-theirs")
    decided = await make_api(strict, clock).approve(theirs, decided_by="carol")
    assert decided.decided_principal == stores.STRICT_APPROVER_LOGIN
    # The self-approver may approve its own: `submit` works, audited as by the requester.
    (consumed,) = await submit_runs(logins["approver"], clock, 1)
    final = await logins["runtime"].get_approval(consumed.approval_request_id)
    assert final is not None
    assert final.requested_principal == final.decided_principal == stores.APPROVER_LOGIN
    trail = await logins["runtime"].audit_events(consumed.approval_request_id)
    assert [(e.kind, e.principal, e.detail_code) for e in trail] == [
        ("approval.created", stores.APPROVER_LOGIN, "run.create"),
        ("approval.approved", stores.APPROVER_LOGIN, "by_requester"),
        ("approval.consumed", stores.APPROVER_LOGIN, "run.create"),
    ]
    refused = await logins["runtime"].audit_events(own)
    assert [(e.kind, e.principal) for e in refused] == [
        ("approval.created", stores.STRICT_APPROVER_LOGIN),
        ("approval.approved", stores.APPROVER_LOGIN),
    ]


async def test_rejecting_needs_an_approver_or_the_requester_and_the_operator_never_decides(
    database: str, logins: dict[str, postgres_store.PostgresStore], clock: ManualClock
) -> None:
    theirs = await _pending(logins["approver"], clock, "act-theirs")
    with pytest.raises(errors.ApprovalNotPermitted):
        await make_api(logins["runtime"], clock).reject(theirs, decided_by="mallory")
    own = await _pending(logins["runtime"], clock, "act-own")
    withdrawn = await make_api(logins["runtime"], clock).reject(own, decided_by="alice")
    assert withdrawn.decided_principal == stores.RUNTIME_LOGIN
    rejected = await make_api(logins["strict"], clock).reject(theirs, decided_by="carol")
    assert rejected.status is Status.REJECTED
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await stores.as_login(
            stores.operator_url(database),
            "UPDATE qinglong.approval_requests SET status = 'approved', version = 2",
        )


async def test_direct_sql_writes_are_audited_by_the_database_itself(
    database: str, clock: ManualClock
) -> None:
    """No INSERT on the audit table is needed: the SECURITY DEFINER trigger writes it."""
    url = stores.runtime_url(database)
    await stores.as_login(
        url,
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('proj-9', 'act-raw', 'run.create', '{{}}', "
        f"'{'a' * 64}', 1)",
    )
    await stores.as_login(
        url,
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        "expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-raw', 'proj-9', 'run.create', "
        f"'act-raw', '{'b' * 64}', 'pending', 1, 'raw-sql', session_user, "
        f"{clock.now_ms() + 60_000}, {clock.now_ms()}, {clock.now_ms()})",
    )
    await stores.as_login(
        stores.strict_approver_url(database),
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        "decided_by = 'carol', decided_principal = session_user "
        "WHERE approval_request_id = 'a-raw'",
    )
    rows = await stores.raw(
        database,
        "SELECT kind, actor, principal, project_id FROM qinglong.security_audit_events "
        "WHERE subject_id = 'a-raw' ORDER BY event_id",
    )
    assert [tuple(r.values()) for r in rows] == [
        ("approval.created", "raw-sql", stores.RUNTIME_LOGIN, "proj-9"),
        ("approval.approved", "carol", stores.STRICT_APPROVER_LOGIN, "proj-9"),
    ]
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await stores.as_login(url, "UPDATE qinglong.security_audit_events SET actor = 'x'")
