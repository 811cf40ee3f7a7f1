"""Attacks on the one-round-trip submit (migration 0018's `qinglong.submit_one`) from plain
logins holding only the role the docs give each.

The function runs as its caller (SECURITY INVOKER), so it must refuse exactly what the six
statements it runs would refuse: every attack asserts the database's own SQLSTATE and that
nothing changed.
"""

from __future__ import annotations

import time

import asyncpg
import pytest

from tests.support import stores, submitted_rows

pytestmark = pytest.mark.postgres

SUBMIT_ONE = (
    "SELECT qinglong.submit_one('p', $1, 'run.create', '{}', $2, NULL, NULL, NULL, NULL, $3, "
    "$2, 'me', $4, 'me', $5, 3, $6)"
)
"""The function as a login would call it: plan `$1`, request `$3`, dispatch `$5`."""


async def _database(pg: stores.Harness) -> str:
    return str(await pg.scalar("SELECT current_database()"))


def _args(n: int) -> tuple[object, ...]:
    now_ms = int(time.time() * 1000)
    return (f"act-{n}", "a" * 64, f"a-{n}", now_ms + 60_000, f"d-{n}", now_ms)


async def _submit(url: str, n: int) -> str | None:
    """Call the function as the login `url` names: the SQLSTATE it was refused with, or None."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        await conn.fetchval(SUBMIT_ONE, *_args(n))
    except asyncpg.PostgresError as refused:
        return str(refused.sqlstate)
    finally:
        await conn.close()
    return None


async def test_a_strict_approver_cannot_approve_its_own_plan_through_the_function(
    pg: stores.Harness,
) -> None:
    before = await submitted_rows.counts(pg)
    state = await _submit(stores.strict_approver_url(await _database(pg)), 1)
    assert state == "QLA02"  # the requester may not approve its own request
    assert await submitted_rows.counts(pg) == before


@pytest.mark.parametrize(
    ("login", "refusal"),
    [
        ("runtime", "QLA01"),  # it may write a request, never approve one
        ("operator", "42501"),  # it may not even write a plan
    ],
)
async def test_a_login_outside_the_approver_role_is_refused_as_by_the_statements(
    pg: stores.Harness, login: str, refusal: str
) -> None:
    url = {"runtime": stores.runtime_url, "operator": stores.operator_url}[login]
    before = await submitted_rows.counts(pg)
    assert await _submit(url(await _database(pg)), 2) == refusal
    assert await submitted_rows.counts(pg) == before


async def test_the_rows_name_the_calling_login_as_every_principal(
    pg: stores.Harness,
) -> None:
    assert await _submit(stores.approver_url(await _database(pg)), 3) is None
    (request,) = await pg.raw(
        "SELECT requested_principal, decided_principal, consumed_principal, status "
        "FROM qinglong.approval_requests WHERE approval_request_id = 'a-3'"
    )
    assert request == {
        "requested_principal": stores.APPROVER_LOGIN,
        "decided_principal": stores.APPROVER_LOGIN,
        "consumed_principal": stores.APPROVER_LOGIN,
        "status": "consumed",
    }
    assert (
        await pg.scalar(
            "SELECT status FROM qinglong.approved_action_dispatch_executions "
            "WHERE dispatch_id = 'd-3'"
        )
        == "pending"
    )
