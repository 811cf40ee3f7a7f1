"""API tokens on both dialects: only the digest is kept, expiry and revocation hold on the
database clock at once, and a principal has one role; on SQLite the store acting as a token's
principal records it and applies its role and separation of duties."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import cancels, digests, errors, principals
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

Role = principals.TokenRole


@contextlib.asynccontextmanager
async def _admin(harness: stores.Harness) -> AsyncIterator[ports.Store]:
    """Who creates tokens: the file's owner on SQLite, the administrator on PostgreSQL."""
    if harness.dialect == "sqlite":
        yield harness.store
        return

    database = str(await harness.scalar("SELECT current_database()"))
    admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
    made: list[str] = []
    try:
        yield admin
    finally:
        made = [f"{stores.INSTALLATION}_p_{t.principal}" for t in await admin.list_tokens()]
        await admin.close()
        await stores.drop_roles(*made)


def _name(harness: stores.Harness, who: str) -> str:
    return stores.session_principal(f"{who}_{time.monotonic_ns() % 10**9}")


async def test_a_token_is_kept_as_its_digest_and_authenticates_until_revoked(
    harness: stores.Harness,
) -> None:
    name = _name(harness, "ann")
    async with _admin(harness) as admin:
        new, secret = principals.NewToken.issue(
            principal=name, role=principals.DEFAULT_ROLE, ttl_ms=3_600_000, created_by="admin"
        )
        created = await admin.create_token(new)
        assert secret.startswith("qlt_")
        assert len(secret) == 47
        assert (created.role, created.last_used_at_ms, created.revoked_at_ms) == (
            Role.VIEWER,
            None,
            None,
        )
        stored = await harness.raw("SELECT * FROM " + _table(harness))
        assert secret not in repr(stored)
        # The runtime (PostgreSQL) / the file's owner (SQLite) authenticates for the API.
        who = await harness.store.authenticate(secret)
        assert who == principals.Authenticated(
            token_id=created.token_id, principal=name, role=Role.VIEWER
        )
        other_last = "B" if secret.endswith("A") else "A"  # another secret, whatever it ended in
        assert await harness.store.authenticate(secret[:-1] + other_last) is None
        assert await harness.store.authenticate("Bearer " + secret) is None
        (listed,) = [t for t in await admin.list_tokens() if t.token_id == created.token_id]
        assert listed.last_used_at_ms is not None
        revoked = await admin.revoke_token(created.token_id)
        assert revoked is not None
        assert revoked.revoked_at_ms is not None
        assert await harness.store.authenticate(secret) is None
        assert await admin.revoke_token("tok_" + "f" * 16) is None


async def test_an_expired_token_no_longer_authenticates(harness: stores.Harness) -> None:
    async with _admin(harness) as admin:
        new, secret = principals.NewToken.issue(
            principal=_name(harness, "exp"), role=Role.VIEWER, ttl_ms=60_000, created_by="a"
        )
        # A lifetime below the bound only through the value itself: the database's clock decides.
        await admin.create_token(dataclasses.replace(new, ttl_ms=200))
        assert await harness.store.authenticate(secret) is not None
        await anyio.sleep(0.3)
        assert await harness.store.authenticate(secret) is None


async def test_a_principal_keeps_one_role_while_it_holds_live_tokens(
    harness: stores.Harness,
) -> None:
    name = _name(harness, "one")
    async with _admin(harness) as admin:
        first, _ = principals.NewToken.issue(
            principal=name, role=Role.VIEWER, ttl_ms=3_600_000, created_by="a"
        )
        await admin.create_token(first)
        second, _ = principals.NewToken.issue(
            principal=name, role=Role.OPERATOR, ttl_ms=3_600_000, created_by="a"
        )
        with pytest.raises(errors.TokenRefused):
            await admin.create_token(second)
        await admin.revoke_token(first.token_id)
        assert (await admin.create_token(second)).role is Role.OPERATOR


def _table(harness: stores.Harness) -> str:
    return "qinglong.api_tokens" if harness.dialect == "postgres" else "api_tokens"


@pytest.fixture
async def owner(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


def _as(store: ports.Store, name: str, role: Role) -> principals.Authenticated:
    return principals.Authenticated(token_id="tok_" + "1" * 16, principal=name, role=role)


CONTEXT = principals.RequestContext(
    token_id="tok_" + "1" * 16, client_address="127.0.0.1", request_id="r-9"
)


async def test_on_sqlite_the_api_principal_is_recorded_and_separation_of_duties_holds(
    owner: stores.Harness,
) -> None:
    assert isinstance(owner.store, sqlite_store.SqliteStore)
    strict = sqlite_store.SqliteStore(owner.store.db, tables=stores.TABLES, self_approval=False)
    clock = ManualClock(int(time.time() * 1000))
    alice = await strict.acting_as(_as(strict, "alice", Role.APPROVER))
    bob = await strict.acting_as(_as(strict, "bob", Role.SUBMITTER))
    plan = api.run_create_plan({"projectId": "p", "taskId": "t", "taskRevision": 1})
    new = api.new_approval(
        plan,
        requested_by="b",
        now_ms=clock.now_ms(),
        approval_ttl_ms=60_000,
        plan_digests=digests.PLAIN,
    )
    pending = await bob.create_approval(new, now_ms=clock.now_ms(), context=CONTEXT)
    assert pending.requested_principal == "bob"
    with pytest.raises(errors.ApprovalNotPermitted):
        await bob.approve(pending.approval_request_id, decided_by="b", now_ms=clock.now_ms())
    approved = await alice.approve(
        pending.approval_request_id, decided_by="a", now_ms=clock.now_ms(), context=CONTEXT
    )
    assert approved.decided_principal == "alice"
    audit = await owner.raw(
        "SELECT kind, principal, token_id, client_address, request_id FROM "
        f"security_audit_events WHERE subject_id = '{pending.approval_request_id}' "
        "ORDER BY event_id"
    )
    assert [(r["kind"], r["principal"]) for r in audit] == [
        ("approval.created", "bob"),
        ("api.create", "bob"),
        ("approval.approved", "alice"),
        ("api.approve", "alice"),
    ]
    assert audit[3]["request_id"] == "r-9"
    assert audit[0]["token_id"] is None
    own = api.new_approval(
        api.run_create_plan({"projectId": "p", "taskId": "u", "taskRevision": 1}),
        requested_by="a",
        now_ms=clock.now_ms(),
        approval_ttl_ms=60_000,
        plan_digests=digests.PLAIN,
    )
    mine = await alice.create_approval(own, now_ms=clock.now_ms())
    with pytest.raises(errors.SelfApprovalRefused):
        await alice.approve(mine.approval_request_id, decided_by="a", now_ms=clock.now_ms())
    assert (await alice.get_approval(mine.approval_request_id)).status.value == "pending"  # type: ignore[union-attr]


async def test_on_sqlite_only_an_operator_principal_cancels(owner: stores.Harness) -> None:
    clock = ManualClock(int(time.time() * 1000))
    (consumed,) = await submit_runs(owner.store, clock, 1)
    request = cancels.Cancel(dispatch_id=consumed.dispatch_id, operator="o", reason_code="dup")
    for role in (Role.VIEWER, Role.SUBMITTER, Role.APPROVER):
        store = await owner.store.acting_as(_as(owner.store, "eve", role))
        with pytest.raises(errors.PrincipalNotPermitted):
            await store.cancel_dispatch(request, now_ms=clock.now_ms(), context=CONTEXT)
    operator = await owner.store.acting_as(_as(owner.store, "olga", Role.OPERATOR))
    done = await operator.cancel_dispatch(request, now_ms=clock.now_ms(), context=CONTEXT)
    assert done.status is not None
    assert done.status.value == "cancelled"
    audit = await owner.raw(
        "SELECT kind, principal FROM security_audit_events "
        f"WHERE subject_id = '{consumed.dispatch_id}' ORDER BY event_id"
    )
    assert [(r["kind"], r["principal"]) for r in audit] == [
        ("dispatch.cancelled", "olga"),
        ("api.cancel", "olga"),
    ]
