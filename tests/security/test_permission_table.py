"""The permission table and the databases give the same answers.

For every operation of `domain/permissions.py` and every token role, a principal of only that
role attempts the operation through the store acting as it: on PostgreSQL the principal's own
role (`token create` made it, the API's NOINHERIT login becomes it), so its grants and
triggers decide and the test asserts their SQLSTATE; on SQLite the store applies the table.
Each refusal must be exactly where the table says no, of the kind the web layer maps.

The approver may approve its own requests here (`<installation>_self_approver` on PostgreSQL,
`QINGLONG_API_SELF_APPROVAL` on SQLite): `submit` approves the request it creates, and that is
separation of duties, not the role's permission.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import (
    approvals,
    cancels,
    digests,
    dispatch_views,
    errors,
    freezes,
    notes,
    permissions,
    principals,
)
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock
from tests.support.recovery import manual_resolution, started_execution

Operation = permissions.Operation
Role = principals.TokenRole
Attempt = Callable[[ports.ActingStore], Awaitable[object]]

API_LOGIN = stores.session_login("perm_api")
_NUMBERS = itertools.count()
_PLANS = itertools.count()

REFUSED_SQLSTATE = {
    Operation.READ: "42501",
    Operation.CREATE: "42501",
    Operation.APPROVE: "42501",
    Operation.REJECT: "42501",
    Operation.CONSUME: "42501",
    Operation.SUBMIT: "42501",
    Operation.CANCEL: "42501",
    Operation.RESOLVE: "42501",
    Operation.NOTE: "42501",
    Operation.LIFT: "42501",
}
"""The SQLSTATE PostgreSQL refuses each operation with, for a role the table refuses."""

CONTEXT = principals.RequestContext(
    token_id="tok_" + "b" * 16, client_address="192.0.2.8", request_id="req-perm"
)


@dataclasses.dataclass
class Principals:
    """A store per token role, each acting as a principal of only that role."""

    harness: stores.Harness
    acting: dict[Role, ports.ActingStore]


async def _sqlite(h: stores.Harness) -> dict[Role, ports.ActingStore]:
    assert isinstance(h.store, sqlite_store.SqliteStore)
    # Another store on the same connection, for the API's self-approval setting only.
    store = sqlite_store.SqliteStore(h.store.db, tables=stores.TABLES, api_self_approval=True)
    return {role: await store.acting_as(_who(f"{role.value}_p", role)) for role in Role}


def _who(name: str, role: Role) -> principals.Authenticated:
    return principals.Authenticated(token_id="tok_" + "0" * 16, principal=name, role=role)


@pytest.fixture(params=stores.DIALECTS)
async def each_role(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Principals]:
    async with stores.open_harness(request.param, tmp_path_factory) as h:
        if h.dialect == "sqlite":
            yield Principals(h, await _sqlite(h))
            return
        database = str(await h.scalar("SELECT current_database()"))
        await stores.create_login(API_LOGIN, "qinglong_api")
        await h.raw(f"ALTER ROLE {API_LOGIN} NOINHERIT")
        number = next(_NUMBERS)
        names = {role: stores.session_principal(f"{role.value}{number}") for role in Role}
        roles = [f"{stores.INSTALLATION}_p_{name}" for name in names.values()]
        admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
        store = await stores.open_postgres(stores.pg_url(database, login=API_LOGIN), max_size=2)
        try:
            for role, name in names.items():
                token, _secret = principals.NewToken.issue(
                    principal=name, role=role, ttl_ms=3_600_000, created_by="test"
                )
                await admin.create_token(token)
            approver = f"{stores.INSTALLATION}_p_{names[Role.APPROVER]}"
            await h.raw(f"GRANT qinglong_self_approver TO {approver}")
            acting = {role: await store.acting_as(_who(names[role], role)) for role in Role}
            yield Principals(h, acting)
        finally:
            await store.close()
            await admin.close()
            await stores.drop_roles(*roles)


def _new(now_ms: int) -> approvals.NewApproval:
    number = next(_PLANS)
    plan = api.run_create_plan({"projectId": "p", "taskId": f"t{number}", "taskRevision": 1})
    return api.new_approval(
        plan,
        requested_by="requester",
        now_ms=now_ms,
        approval_ttl_ms=3_600_000,
        plan_digests=digests.PLAIN,
    )


async def _pending(h: stores.Harness, now_ms: int) -> str:
    created = await h.store.create_approval(_new(now_ms), now_ms=now_ms)
    return created.approval_request_id


async def _attempt(operation: Operation, h: stores.Harness, now: ManualClock) -> Attempt:
    """Set up what `operation` acts on (as the runtime, approver and operator logins); the
    attempt an acting store makes."""
    at = now.now_ms()
    if operation is Operation.READ:
        (consumed,) = await submit_runs(h.approver_store, now, 1)

        async def read(s: ports.ActingStore) -> object:
            await s.get_approval(consumed.approval_request_id)
            return await s.list_dispatches(dispatch_views.ListQuery(), now_ms=at)

        return read
    if operation is Operation.CREATE:
        return lambda s: s.create_approval(_new(at), now_ms=at, context=CONTEXT)
    if operation is Operation.APPROVE:
        pending = await _pending(h, at)
        return lambda s: s.approve(pending, decided_by="d", now_ms=at, context=CONTEXT)
    if operation is Operation.REJECT:
        pending = await _pending(h, at)
        return lambda s: s.reject(pending, decided_by="d", now_ms=at, context=CONTEXT)
    if operation is Operation.CONSUME:
        approved = await _pending(h, at)
        await h.approver_store.approve(approved, decided_by="d", now_ms=at)
        return lambda s: s.consume(approved, now_ms=at, max_attempts=5, context=CONTEXT)
    if operation is Operation.SUBMIT:
        return lambda s: s.submit([_new(at)], approved_by="d", now_ms=at, max_attempts=5)
    if operation is Operation.CANCEL:
        (consumed,) = await submit_runs(h.approver_store, now, 1)
        cancel = cancels.Cancel(dispatch_id=consumed.dispatch_id, operator="o", reason_code="c")
        return lambda s: s.cancel_dispatch(cancel, now_ms=at, context=CONTEXT)
    if operation is Operation.NOTE:
        pending = await _pending(h, at)
        return lambda s: s.write_note(notes.Subject.APPROVAL, pending, "seen it")
    if operation is Operation.LIFT:
        # Requested by the runtime's login or the OS user, never by a principal of the test.
        (frozen,) = await submit_runs(h.approver_store, now, 1)
        wall = int(time.time() * 1000)  # the database's clock decides the freeze
        writer = h.store if h.dialect == "sqlite" else await h.owner()
        await writer.add_freeze(
            freezes.NewFreeze(from_ms=wall - 60_000, until_ms=wall + 3_600_000, reason="perm")
        )
        return lambda s: s.lift_freeze(frozen.dispatch_id, reason="checked by hand")
    assert operation is Operation.RESOLVE
    past = ManualClock(at - 3_600_000)
    await submit_runs(h.approver_store, past, 1)
    dispatch, identity = await started_execution(h, past)
    resolution = manual_resolution(identity, dispatch.project_id)
    return lambda s: s.resolve_recovery(resolution, now_ms=at, context=CONTEXT)


def _refusal(dialect: str, operation: Operation, exc: Exception) -> str | None:
    """What refused `operation` as the table expects it refused, or None for anything else."""
    if isinstance(exc, errors.FreezeRefused) and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__  # a freeze write names the database's refusal so
    if dialect == "postgres":
        if isinstance(exc, errors.StoreError) and exc.code == "permission_denied":
            return str(getattr(exc.__cause__, "sqlstate", None))
        return None
    wanted = (
        errors.ApprovalNotPermitted
        if operation in permissions.APPROVAL_STEPS
        else errors.PrincipalNotPermitted
    )
    return "refused" if type(exc) is wanted else None


async def test_the_database_refuses_exactly_what_the_table_refuses(each_role: Principals) -> None:
    h = each_role.harness
    now = ManualClock(int(time.time() * 1000))
    wrong: list[str] = []
    for operation in Operation:
        if operation in permissions.WEB_ONLY:
            continue
        for role in Role:
            attempt = await _attempt(operation, h, now)
            expected = "refused" if h.dialect == "sqlite" else REFUSED_SQLSTATE[operation]
            try:
                await attempt(each_role.acting[role])
            except Exception as exc:  # compared with the table below
                got = _refusal(h.dialect, operation, exc)
                if permissions.permits(role, operation) or got != expected:
                    wrong.append(f"{operation}/{role}: {type(exc).__name__} {got} {exc}")
                continue
            if not permissions.permits(role, operation):
                wrong.append(f"{operation}/{role}: allowed, the table refuses it")
    assert wrong == []
