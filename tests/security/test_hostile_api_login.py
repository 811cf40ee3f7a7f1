"""Attacks through the API's login: as itself it can do nothing; as a principal, only what that
principal's role may, and the database records and checks that principal, not the login.

The API's login is NOINHERIT and a member of `qinglong_api`; each principal's role is made by
`token create` (the store, as the administrator). Each attack asserts the database's SQLSTATE
and that nothing changed; every principal role made here is dropped, pass or fail.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import approvals, cancels, digests, errors, principals, states
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import manual_resolution, started_execution

pytestmark = pytest.mark.postgres

API_LOGIN = stores.session_login("api_login")
_NUMBERS = itertools.count()
EXECUTIONS = "qinglong.approved_action_dispatch_executions"


class Api:
    """The API's login on one test database and the principals it may become."""

    def __init__(self, database: str, store: postgres_store.PostgresStore) -> None:
        self.database = database
        self.store = store
        self.url = stores.pg_url(database, login=API_LOGIN)
        self.names: dict[str, str] = {}

    def role(self, who: str) -> str:
        return f"{stores.INSTALLATION}_p_{self.names[who]}"

    async def acting(self, who: str, role: principals.TokenRole) -> ports.ActingStore:
        return await self.store.acting_as(
            principals.Authenticated(
                token_id="tok_" + "0" * 16, principal=self.names[who], role=role
            )
        )


@pytest.fixture
async def api_login(pg: stores.Harness) -> AsyncIterator[Api]:
    database = str(await pg.scalar("SELECT current_database()"))
    await stores.create_login(API_LOGIN, "qinglong_api")
    await pg.raw(f"ALTER ROLE {API_LOGIN} NOINHERIT")
    number = next(_NUMBERS)
    kinds = {
        "alice": principals.TokenRole.APPROVER,
        "bob": principals.TokenRole.APPROVER,
        "sam": principals.TokenRole.SUBMITTER,
        "carol": principals.TokenRole.OPERATOR,
        "vic": principals.TokenRole.VIEWER,
    }
    names = {who: stores.session_principal(f"{who}{number}") for who in kinds}
    roles = [f"{stores.INSTALLATION}_p_{name}" for name in names.values()]
    admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
    store = await stores.open_postgres(stores.pg_url(database, login=API_LOGIN), max_size=2)
    try:
        for who, kind in kinds.items():
            token, _secret = principals.NewToken.issue(
                principal=names[who], role=kind, ttl_ms=3_600_000, created_by="test"
            )
            await admin.create_token(token)
        harness = Api(database, store)
        harness.names = names
        yield harness
    finally:
        await store.close()
        await admin.close()
        await stores.drop_roles(*roles)


@pytest.fixture
def now() -> ManualClock:
    return ManualClock(int(time.time() * 1000))


CONTEXT = principals.RequestContext(
    token_id="tok_" + "a" * 16, client_address="192.0.2.7", request_id="req-1"
)


async def _refused(url: str, *statements: str) -> str:
    """Run the statements in one transaction as `url`'s login; the SQLSTATE of the refusal."""
    conn = await asyncpg.connect(url, timeout=5)

    async def run() -> None:
        async with conn.transaction():
            for sql in statements:
                await conn.execute(sql)

    try:
        with pytest.raises(asyncpg.PostgresError) as caught:
            await run()
        return str(caught.value.sqlstate)
    finally:
        await conn.close()


async def _everything(pg: stores.Harness) -> list[dict[str, Any]]:
    return await pg.raw(
        "SELECT (SELECT count(*) FROM qinglong.approval_requests) AS requests, "
        "(SELECT count(*) FROM qinglong.action_plans) AS plans, "
        "(SELECT count(*) FROM qinglong.security_audit_events) AS audit, "
        "(SELECT count(*) FROM qinglong.recovery_resolutions) AS resolutions, "
        "(SELECT count(*) FROM qinglong.execution_events) AS events, "
        "(SELECT string_agg(status || version, ',' ORDER BY approval_request_id) "
        " FROM qinglong.approval_requests) AS states, "
        f"(SELECT string_agg(status, ',' ORDER BY dispatch_id) FROM {EXECUTIONS}) AS executions, "
        "(SELECT count(*) FROM qinglong.api_tokens WHERE last_used_at_ms IS NOT NULL) AS used"
    )


async def _request_by(
    api_login: Api, who: str, now: ManualClock, role: principals.TokenRole
) -> approvals.Approval:
    store = await api_login.acting(who, role)
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    new = api.new_approval(
        plan,
        requested_by=who,
        now_ms=now.now_ms(),
        approval_ttl_ms=3_600_000,
        plan_digests=digests.PLAIN,
    )
    return await store.create_approval(new, now_ms=now.now_ms(), context=CONTEXT)


def _approve_sql(approval_request_id: str) -> str:
    return (
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        "decided_by = 'x', decided_principal = qinglong.acting_principal() "
        f"WHERE approval_request_id = '{approval_request_id}'"
    )


async def test_the_api_login_as_itself_reads_and_writes_nothing(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    pending = await _request_by(api_login, "sam", now, principals.TokenRole.SUBMITTER)
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    before = await _everything(pg)
    attacks = (
        _approve_sql(pending.approval_request_id),
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms) VALUES ('p', 'act-y', 'run.create', '{{}}', "
        f"'{'c' * 64}', 1)",
        "INSERT INTO qinglong.recovery_resolutions (dispatch_id, source, resolution, "
        "resolved_by, principal, reason_code, execution_attempt, execution_version, "
        "lease_owner, lease_token, started_at_ms, committed_at_ms) VALUES "
        f"('{consumed.dispatch_id}', 'manual', 'failed', 'op', session_user, 'op', 1, 1, "
        "'w', 't', 1, 0)",
        f"UPDATE {EXECUTIONS} SET status = 'cancelled', version = version + 1 "
        f"WHERE dispatch_id = '{consumed.dispatch_id}'",
        "SELECT * FROM qinglong.api_tokens",
        "SELECT secret_sha256 FROM qinglong.api_tokens",
        "SELECT * FROM qinglong.approval_requests",
    )
    for attack in attacks:
        assert await _refused(api_login.url, attack) == "42501", attack
    assert await _everything(pg) == before


async def test_the_api_login_becomes_no_role_it_was_not_granted(
    pg: stores.Harness, api_login: Api
) -> None:
    admin = await stores.open_postgres(stores.pg_url(api_login.database), max_size=1)
    try:
        (token,) = [t for t in await admin.list_tokens() if t.principal == api_login.names["vic"]]
        await admin.revoke_token(token.token_id)
    finally:
        await admin.close()
    before = await _everything(pg)
    for role in (
        api_login.role("vic"),
        "qinglong_runtime",
        "qinglong_migrator",
        "qinglong_recorder",
        "qinglong_pruner",
    ):
        assert await _refused(api_login.url, f"SET LOCAL ROLE {role}") == "42501", role
    # Before PostgreSQL 16 membership chains let it SET ROLE into its principals' kind roles;
    # there it is nobody, and the database refuses every step that names a principal.
    pending = await _request_by(
        api_login, "bob", ManualClock(int(time.time() * 1000)), principals.TokenRole.APPROVER
    )
    before = await _everything(pg)
    state = await _refused(
        api_login.url, "SET LOCAL ROLE qinglong_approver", _approve_sql(pending.approval_request_id)
    )
    assert state in ("42501", "QLA01")
    assert await _everything(pg) == before


async def test_a_principals_transaction_leaves_the_pooled_session_as_the_api_login(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    # The pool runs no reset query when it takes a connection back, so a role that outlived
    # its transaction would make the login's next transaction on that connection a principal.
    one = await stores.open_postgres(api_login.url, max_size=1)
    try:
        assert isinstance(one, postgres_store.PostgresStore)
        on_one = Api(api_login.database, one)
        on_one.names = api_login.names
        pending = await _request_by(on_one, "sam", now, principals.TokenRole.SUBMITTER)
        assert pending.requested_principal == api_login.names["sam"]

        async def who(conn: Any) -> tuple[str, str]:
            row = await conn.fetchrow("SELECT current_user, session_user")
            return row[0], row[1]

        assert await one.db.read(who) == (API_LOGIN, API_LOGIN)
        before = await _everything(pg)
        with pytest.raises(errors.StoreError) as refused:
            await one.db.read(lambda conn: conn.fetch("SELECT * FROM qinglong.approval_requests"))
        assert refused.value.code == "permission_denied"
        assert getattr(refused.value.__cause__, "sqlstate", None) == "42501"  # the database's
        assert await _everything(pg) == before
    finally:
        await one.close()


async def test_as_alice_the_api_approves_bobs_request_and_the_record_names_alice(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    pending = await _request_by(api_login, "bob", now, principals.TokenRole.APPROVER)
    alice = await api_login.acting("alice", principals.TokenRole.APPROVER)
    approved = await alice.approve(
        pending.approval_request_id, decided_by="alice", now_ms=now.now_ms(), context=CONTEXT
    )
    assert approved.requested_principal == api_login.names["bob"]
    assert approved.decided_principal == api_login.names["alice"]
    audit = await pg.raw(
        "SELECT kind, principal, token_id, client_address, request_id "
        "FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{pending.approval_request_id}' ORDER BY event_id"
    )
    assert [(row["kind"], row["principal"]) for row in audit] == [
        ("approval.created", api_login.names["bob"]),
        ("api.create", api_login.names["bob"]),
        ("approval.approved", api_login.names["alice"]),
        ("api.approve", api_login.names["alice"]),
    ]
    assert {(r["token_id"], r["client_address"], r["request_id"]) for r in audit[1::2]} == {
        (CONTEXT.token_id, CONTEXT.client_address, CONTEXT.request_id)
    }
    assert API_LOGIN not in {row["principal"] for row in audit}


async def test_alice_approving_her_own_request_is_refused_by_the_database(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    pending = await _request_by(api_login, "alice", now, principals.TokenRole.APPROVER)
    before = await _everything(pg)
    alice = await api_login.acting("alice", principals.TokenRole.APPROVER)
    with pytest.raises(errors.SelfApprovalRefused):
        await alice.approve(
            pending.approval_request_id, decided_by="alice", now_ms=now.now_ms(), context=CONTEXT
        )
    state = await _refused(
        api_login.url,
        f"SET LOCAL ROLE {api_login.role('alice')}",
        _approve_sql(pending.approval_request_id),
    )
    assert state == "QLA02"
    assert await _everything(pg) == before


async def test_a_self_approver_principal_approves_its_own_request(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    await pg.raw(f"GRANT qinglong_self_approver TO {api_login.role('alice')}")
    pending = await _request_by(api_login, "alice", now, principals.TokenRole.APPROVER)
    alice = await api_login.acting("alice", principals.TokenRole.APPROVER)
    approved = await alice.approve(
        pending.approval_request_id, decided_by="alice", now_ms=now.now_ms(), context=CONTEXT
    )
    assert approved.decided_principal == approved.requested_principal == api_login.names["alice"]


async def test_a_principal_role_the_api_no_longer_holds_names_nobody(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    # A principal is a role the API was granted: once alice's token is revoked, a login that
    # an administrator had also granted her role, SET ROLE into it, acts as itself.
    pending = await _request_by(api_login, "bob", now, principals.TokenRole.APPROVER)
    await pg.raw(f"GRANT {api_login.role('alice')} TO {stores.STRICT_APPROVER_LOGIN}")
    admin = await stores.open_postgres(stores.pg_url(api_login.database), max_size=1)
    try:
        alice = api_login.names["alice"]
        (token,) = [t for t in await admin.list_tokens() if t.principal == alice]
        await admin.revoke_token(token.token_id)
    finally:
        await admin.close()
    before = await _everything(pg)
    state = await _refused(
        stores.strict_approver_url(api_login.database),
        f"SET LOCAL ROLE {api_login.role('alice')}",
        "UPDATE qinglong.approval_requests SET status = 'approved', version = 2, "
        f"decided_by = 'x', decided_principal = '{alice}' "
        f"WHERE approval_request_id = '{pending.approval_request_id}'",
    )
    assert state == "QLA01"
    assert await _everything(pg) == before


async def test_a_submitter_principal_requests_but_never_approves(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    pending = await _request_by(api_login, "bob", now, principals.TokenRole.APPROVER)
    before = await _everything(pg)
    state = await _refused(
        api_login.url,
        f"SET LOCAL ROLE {api_login.role('sam')}",
        _approve_sql(pending.approval_request_id),
    )
    assert state == "42501"
    assert await _everything(pg) == before


async def test_an_operator_principal_resolves_by_hand_and_the_resolution_names_it(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    past = ManualClock(now.now_ms() - 3_600_000)
    await submit_runs(pg.approver_store, past, 1)
    dispatch, identity = await started_execution(pg, past)
    resolution = manual_resolution(identity, dispatch.project_id)
    before = await _everything(pg)
    alice = await api_login.acting("alice", principals.TokenRole.APPROVER)
    with pytest.raises(errors.StoreError) as refused:
        await alice.resolve_recovery(resolution, now_ms=now.now_ms(), context=CONTEXT)
    assert refused.value.code == "permission_denied"
    assert await _everything(pg) == before
    carol = await api_login.acting("carol", principals.TokenRole.OPERATOR)
    done = await carol.resolve_recovery(resolution, now_ms=now.now_ms(), context=CONTEXT)
    assert done.outcome.value == "completed"
    stored = await carol.get_resolution(dispatch.dispatch_id)
    assert stored is not None
    assert stored.principal == api_login.names["carol"]
    audit = await pg.raw(
        "SELECT kind, principal, token_id FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{dispatch.dispatch_id}' ORDER BY event_id"
    )
    assert [(row["kind"], row["principal"]) for row in audit] == [
        ("recovery.manual_resolution", api_login.names["carol"]),
        ("api.resolve", api_login.names["carol"]),
    ]


async def test_only_an_operator_principal_cancels_and_the_cancel_names_it(
    pg: stores.Harness, api_login: Api, now: ManualClock
) -> None:
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    before = await _everything(pg)
    for who in ("alice", "vic"):
        state = await _refused(
            api_login.url,
            f"SET LOCAL ROLE {api_login.role(who)}",
            f"UPDATE {EXECUTIONS} SET status = 'cancelled', version = version + 1 "
            f"WHERE dispatch_id = '{consumed.dispatch_id}'",
        )
        assert state == "42501", who
    assert await _everything(pg) == before
    carol = await api_login.acting("carol", principals.TokenRole.OPERATOR)
    cancelled = await carol.cancel_dispatch(
        cancels.Cancel(dispatch_id=consumed.dispatch_id, operator="c", reason_code="dup"),
        now_ms=now.now_ms(),
        context=CONTEXT,
    )
    assert cancelled.status is states.ExecutionStatus.CANCELLED
    audit = await pg.raw(
        "SELECT kind, principal FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{consumed.dispatch_id}' ORDER BY event_id"
    )
    assert {row["principal"] for row in audit} == {api_login.names["carol"]}


def _auth_failed_row(principal: str, token_id: str = "NULL") -> str:
    return (
        "INSERT INTO qinglong.security_audit_events (kind, actor, principal, project_id,"
        " subject_id, detail_code, token_id, client_address, request_id, committed_at_ms)"
        f" VALUES ('api.auth_failed', 'api', {principal}, '-', 'api', 'invalid', {token_id},"
        " '192.0.2.9', 'req_forged', 0)"
    )


async def test_only_the_runtime_as_itself_records_a_failed_authentication(
    pg: stores.Harness, api_login: Api
) -> None:
    """Nobody else can forge (or bury) a failed login: not the API's login as itself, not a
    principal it became, not an operator; and the runtime's row never names a token."""
    database = api_login.database
    before = await _everything(pg)
    assert (
        await _refused(api_login.url, _auth_failed_row("SESSION_USER"))
    ) == "42501"  # no INSERT as itself
    for who in ("sam", "carol"):
        state = await _refused(
            api_login.url,
            f"SET LOCAL ROLE {api_login.role(who)}",
            _auth_failed_row(f"'{api_login.names[who]}'"),
        )
        assert state == "QLI01", who
    assert (
        await _refused(stores.operator_url(database), _auth_failed_row("SESSION_USER"))
    ) == "QLI01"
    assert (
        await _refused(
            stores.runtime_url(database), _auth_failed_row("SESSION_USER", "'tok_0000000000000000'")
        )
    ) == "QLI01"
    assert await _everything(pg) == before
    # The positive control: the runtime, as itself, without a token id.
    conn = await asyncpg.connect(stores.runtime_url(database), timeout=5)
    try:
        await conn.execute(_auth_failed_row("SESSION_USER"))
    finally:
        await conn.close()
    rows = await pg.raw(
        "SELECT principal, client_address, token_id FROM qinglong.security_audit_events"
        " WHERE kind = 'api.auth_failed'"
    )
    assert [(r["client_address"], r["token_id"]) for r in rows] == [("192.0.2.9", None)]
