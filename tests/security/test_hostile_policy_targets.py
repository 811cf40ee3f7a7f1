"""The policy of a request by its target, against plain logins (PostgreSQL).

The database chooses the policy in force from the request's plan's target (migration 0032):
a request whose plan names `prod-db` carries the `prod-` policy whatever its writer does. A
plain approver login (the role that writes requests) tries to write the request before its
plan, to name its own copy, and to move the plan's target or the copy afterwards; each is
refused with the database's SQLSTATE and nothing changes.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from tests.support import stores

pytestmark = pytest.mark.postgres

_POLICIES = (
    "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
    "target_prefix) VALUES ('default', 'test.target', 1, NULL), "
    "('prod', 'test.target', 2, 'prod-')"
)


def _plan(ref: str, target: str) -> str:
    return (
        "INSERT INTO qinglong.action_plans (project_id, action_ref, action_type, plan_json, "
        f"plan_digest, created_at_ms, target) VALUES ('p1', '{ref}', 'test.target', '{{}}', "
        f"repeat('a', 64), {int(time.time() * 1000)}, '{target}')"
    )


def _request(ref: str) -> str:
    now = int(time.time() * 1000)
    return (
        "INSERT INTO qinglong.approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        f"expires_at_ms, created_at_ms, updated_at_ms) VALUES ('a-{ref}', 'p1', 'test.target', "
        f"'{ref}', repeat('a', 64), 'pending', 1, 'mallory', session_user, {now + 600_000}, "
        f"{now}, {now})"
    )


async def _refused(url: str, *statements: str) -> str:
    """Run `statements` in one transaction as the login `url`; the SQLSTATE that ended it."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        with pytest.raises(asyncpg.PostgresError) as caught:  # noqa: PT012 - one transaction
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
        return str(caught.value.sqlstate)
    finally:
        await conn.close()


async def _snapshot(pg: stores.Harness) -> tuple[Any, ...]:
    tables = ("action_plans", "approval_requests", "approval_request_policies")
    return tuple(
        [
            [dict(r) for r in await pg.raw(f"SELECT * FROM qinglong.{t} ORDER BY 1, 2")]
            for t in tables
        ]
    )


async def _policy_of(pg: stores.Harness, request: str) -> list[tuple[str, int, Any]]:
    rows = await pg.raw(
        "SELECT policy_name, approvals_required, target_prefix "
        f"FROM qinglong.approval_request_policies WHERE approval_request_id = '{request}'"
    )
    return [(r["policy_name"], r["approvals_required"], r["target_prefix"]) for r in rows]


async def test_a_request_under_a_prefix_carries_its_policy_whatever_the_writer_does(
    pg: stores.Harness,
) -> None:
    await pg.raw(_POLICIES)
    url = stores.approver_url(str(await pg.scalar("SELECT current_database()")))
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(_plan("prod-1", "prod-db"))
            await conn.execute(_request("prod-1"))
            await conn.execute(_plan("staging-1", "staging-db"))
            await conn.execute(_request("staging-1"))
    finally:
        await conn.close()
    assert await _policy_of(pg, "a-prod-1") == [("prod", 2, "prod-")]
    assert await _policy_of(pg, "a-staging-1") == [("default", 1, None)]
    # Plan and request in one statement: the copy still reads the plan's target.
    conn = await asyncpg.connect(url, timeout=5)
    try:
        plan = _plan("prod-3", "prod-db").replace("INSERT", "WITH p AS (INSERT", 1)
        await conn.execute(f"{plan} RETURNING 1) {_request('prod-3')}")
    finally:
        await conn.close()
    assert await _policy_of(pg, "a-prod-3") == [("prod", 2, "prod-")]
    before = await _snapshot(pg)
    forged_copy = (
        "INSERT INTO qinglong.approval_request_policies (approval_request_id, policy_name, "
        "policy_version, approvals_required, denials_to_reject, approver_groups, "
        "reason_required) VALUES ('a-prod-2', 'default', 1, 1, 1, '{}', false)"
    )
    for statements, sqlstate in (
        # The request before its plan: the key refuses it before any policy is chosen.
        ((_request("prod-2"), _plan("prod-2", "prod-db")), "23503"),
        # The writer names its own copy: no role may write one.
        ((_plan("prod-2", "prod-db"), forged_copy), "42501"),
        ((_plan("prod-2", "prod-db"), _request("prod-2"), forged_copy), "42501"),
        # Afterwards: the plan's target and the copy never move.
        (
            ("UPDATE qinglong.action_plans SET target = 'staging-db' WHERE action_ref = 'prod-1'",),
            "42501",
        ),
        (("UPDATE qinglong.approval_request_policies SET approvals_required = 1",), "42501"),
        (("DELETE FROM qinglong.approval_request_policies",), "42501"),
    ):
        assert await _refused(url, *statements) == sqlstate, statements
        assert await _snapshot(pg) == before, statements


async def test_a_prefix_is_printable_bounded_and_no_pattern_whoever_writes_it(
    pg: stores.Harness,
) -> None:
    before = await pg.raw("SELECT * FROM qinglong.approval_policies")
    for prefix in ("prod-*", "prod-%", "prod?", "prod db", "", "x" * 129, "pr\x01od"):
        with pytest.raises(asyncpg.PostgresError) as caught:
            await pg.raw(
                "INSERT INTO qinglong.approval_policies (name, action_type, approvals_required, "
                f"target_prefix) VALUES ('bad', 'test.target', 1, E'{prefix}')"
            )
        assert caught.value.sqlstate == "23514", prefix
        assert await pg.raw("SELECT * FROM qinglong.approval_policies") == before
