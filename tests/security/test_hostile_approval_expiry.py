"""Approval expiry against plain logins (PostgreSQL).

Only a pending request whose lifetime ran out on the database's clock becomes `expired`,
only by the runtime, and `expired` is terminal: nobody un-expires, approves or consumes it.
Each attack runs as a login holding only its documented role and asserts the database's
SQLSTATE and that nothing changed.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.recovery import reconciler
from tests.support import refusals, stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

REQUESTS = "qinglong.approval_requests"
SHORT_TTL_MS = 20

_EXPIRE = (
    f"UPDATE {REQUESTS} SET status = 'expired', version = 2, decided_by = 'expiry', "
    "decided_principal = session_user, updated_at_ms = 1 WHERE approval_request_id = $1"
)
_UNEXPIRE = {
    "pending": f"UPDATE {REQUESTS} SET status = 'pending', version = 1, decided_by = NULL, "
    "decided_principal = NULL WHERE approval_request_id = $1",
    "approved": f"UPDATE {REQUESTS} SET status = 'approved', version = 2, decided_by = 'bob', "
    "decided_principal = session_user WHERE approval_request_id = $1",
}
_CONSUME = (
    f"UPDATE {REQUESTS} SET status = 'consumed', version = 3, consumed_at_ms = 1, "
    "consumed_principal = session_user WHERE approval_request_id = $1"
)


@pytest.fixture
def now() -> ManualClock:
    """The real clock: the database's clock must see these lifetimes as they are."""
    return ManualClock(int(time.time() * 1000))


def _plan(ref: str) -> dict[str, object]:
    return api.run_create_plan(
        {"projectId": "proj-1", "taskId": "task-1", "taskRevision": 4, "actionRef": ref}
    ).to_canonical_dict()


async def _database(pg: stores.Harness) -> str:
    return str(await pg.scalar("SELECT current_database()"))


async def _snapshot(pg: stores.Harness, approval_request_id: str) -> tuple[Any, ...]:
    row = await pg.raw(
        f"SELECT * FROM {REQUESTS} WHERE approval_request_id = '{approval_request_id}'"
    )
    audit = await pg.raw(
        "SELECT count(*) AS n FROM qinglong.security_audit_events "
        f"WHERE subject_id = '{approval_request_id}'"
    )
    return dict(row[0]), audit[0]["n"]


async def _timed_out(pg: stores.Harness, now: ManualClock, ref: str) -> str:
    """A pending request whose lifetime ran out on the database's clock."""
    short = api.Api(
        pg.approver_store, now, api.Policy(approval_ttl_ms=SHORT_TTL_MS, max_attempts=5)
    )
    created = await short.create_approval("run.create", _plan(ref), requested_by="alice")
    await anyio.sleep(SHORT_TTL_MS * 5 / 1000)
    return created.approval_request_id


async def test_the_runtime_cannot_expire_a_request_whose_lifetime_has_not_run_out(
    pg: stores.Harness, now: ManualClock
) -> None:
    created = await make_api(pg.approver_store, now).create_approval(
        "run.create", _plan("act-live"), requested_by="alice"
    )
    runtime = stores.runtime_url(await _database(pg))
    before = await _snapshot(pg, created.approval_request_id)
    state = await refusals.sqlstate_as(runtime, _EXPIRE, created.approval_request_id)
    assert state == "QLA03"
    assert await _snapshot(pg, created.approval_request_id) == before


async def test_only_the_runtime_expires_a_timed_out_request(
    pg: stores.Harness, now: ManualClock
) -> None:
    timed_out = await _timed_out(pg, now, "act-short")
    database = await _database(pg)
    before = await _snapshot(pg, timed_out)
    for login, refused in (
        # An approver may reject; it may not dress a decision up as the clock's outcome.
        (stores.approver_url(database), "QLA01"),
        (stores.strict_approver_url(database), "QLA01"),
        (stores.operator_url(database), "42501"),  # no UPDATE at all
    ):
        assert await refusals.sqlstate_as(login, _EXPIRE, timed_out) == refused, login
        assert await _snapshot(pg, timed_out) == before
    # The product's own sweep, run by an approver's login, is refused the same way.
    with pytest.raises(errors.ApprovalNotPermitted):
        await pg.approver_store.expire_approvals(now_ms=now.ms)
    assert await _snapshot(pg, timed_out) == before
    # The one move it admits, for contrast: the runtime's sweep.
    assert (await reconciler.Reconciler(pg.store, {}, now).reconcile_pass()).approvals_expired == 1


async def test_nobody_un_expires_approves_or_consumes_an_expired_request(
    pg: stores.Harness, now: ManualClock
) -> None:
    timed_out = await _timed_out(pg, now, "act-short")
    report = await reconciler.Reconciler(pg.store, {}, now).reconcile_pass()
    assert report.approvals_expired == 1
    database = await _database(pg)
    before = await _snapshot(pg, timed_out)
    assert before[0]["status"] == "expired"
    for login in (stores.runtime_url(database), stores.approver_url(database)):
        for target, statement in (*_UNEXPIRE.items(), ("consumed", _CONSUME)):
            state = await refusals.sqlstate_as(login, statement, timed_out)
            assert state == "QLA03", (login, target)
            assert await _snapshot(pg, timed_out) == before
        assert await refusals.sqlstate_as(login, _EXPIRE, timed_out) == "QLA03"
        assert await _snapshot(pg, timed_out) == before
