"""The policy of a request by its target on an edge file, by a plain `sqlite3` connection.

As on PostgreSQL (tests/security/test_hostile_policy_targets.py): a request whose plan names
`prod-db` carries the `prod-` policy whatever its writer does. A plain connection need not
enforce the plan key, so the file refuses a request under policies without its plan; a forged
copy, a moved target and a changed copy are refused too. Each attack asserts the trigger's
own abort and that nothing changed.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import refusals, stores

_POLICIES = (
    "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
    "target_prefix, written_by) VALUES ('default', 1, 'test.target', 1, NULL, 'owner'), "
    "('prod', 1, 'test.target', 2, 'prod-', 'owner')"
)

_DB_NOW = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


def _plan(ref: str, target: str) -> str:
    return (
        "INSERT INTO action_plans (project_id, action_ref, action_type, plan_json, plan_digest, "
        f"created_at_ms, target) VALUES ('p1', '{ref}', 'test.target', '{{}}', '{'a' * 64}', "
        f"{int(time.time() * 1000)}, '{target}')"
    )


def _request(ref: str) -> str:
    now = int(time.time() * 1000)
    return (
        "INSERT INTO approval_requests (approval_request_id, project_id, action_type, "
        "action_ref, action_digest, status, version, requested_by, requested_principal, "
        f"expires_at_ms, created_at_ms, updated_at_ms, db_expires_at_ms) VALUES ('a-{ref}', "
        f"'p1', 'test.target', '{ref}', '{'a' * 64}', 'pending', 1, 'mallory', 'mallory', "
        f"{now + 600_000}, {now}, {now}, {_DB_NOW} + 600000)"
    )


async def _snapshot(h: stores.Harness) -> tuple[Any, ...]:
    tables = ("action_plans", "approval_requests", "approval_request_policies")
    return tuple([await h.raw(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables])


async def _policy_of(h: stores.Harness, request: str) -> list[tuple[str, int, Any]]:
    rows = await h.raw(
        "SELECT policy_name, approvals_required, target_prefix FROM approval_request_policies "
        f"WHERE approval_request_id = '{request}'"
    )
    return [(r["policy_name"], r["approvals_required"], r["target_prefix"]) for r in rows]


async def test_a_request_under_a_prefix_carries_its_policy_whatever_the_writer_does(
    edge: stores.Harness,
) -> None:
    await edge.raw(_POLICIES)
    for ref, target in (("prod-1", "prod-db"), ("staging-1", "staging-db")):
        await edge.raw(_plan(ref, target))
        await edge.raw(_request(ref))
    assert await _policy_of(edge, "a-prod-1") == [("prod", 2, "prod-")]
    assert await _policy_of(edge, "a-staging-1") == [("default", 1, None)]
    await edge.raw(_plan("prod-2", "prod-db"))
    before = await _snapshot(edge)
    for statement, refusal in (
        # The request before its plan (the connection does not enforce the key).
        (_request("prod-3"), "plan is written before it"),
        # A copy naming the lenient policy, for the request or in place of its copy.
        (
            "INSERT INTO approval_request_policies VALUES "
            "('a-prod-1', 'default', 1, 1, 1, '[]', 0, NULL, NULL, NULL)",
            "carries the policy in force",
        ),
        (
            "INSERT OR REPLACE INTO approval_request_policies VALUES "
            "('a-prod-1', 'default', 1, 1, 1, '[]', 0, NULL, NULL, NULL)",
            "carries the policy in force",
        ),
        (
            "INSERT OR REPLACE INTO approval_request_policies VALUES "
            "('a-prod-1', 'prod', 1, 2, 1, '[]', 0, NULL, NULL, NULL)",
            "carries the policy in force",
        ),
        # Afterwards: the plan's target and the copy never move.
        (
            "UPDATE action_plans SET target = 'staging-db' WHERE action_ref = 'prod-1'",
            "action_plans is immutable",
        ),
        ("UPDATE approval_request_policies SET approvals_required = 1", "never changes"),
        ("DELETE FROM approval_request_policies", "never changes"),
    ):
        assert refusal in await refusals.sqlite_abort(edge, statement), statement
        assert await _snapshot(edge) == before, statement


async def test_a_prefix_is_printable_bounded_and_no_pattern_whoever_writes_it(
    edge: stores.Harness,
) -> None:
    before = await edge.raw("SELECT * FROM approval_policies")
    for prefix in ("'prod-*'", "'prod-%'", "'prod?'", "'prod db'", "''", f"'{'x' * 129}'",
                   "'pr' || char(1) || 'od'", "X'70726f64'"):  # fmt: skip
        statement = (
            "INSERT INTO approval_policies (name, version, action_type, approvals_required, "
            f"target_prefix, written_by) VALUES ('bad', 1, 'test.target', 1, {prefix}, 'owner')"
        )
        assert "a target prefix is 1 to 128" in await refusals.sqlite_abort(edge, statement)
        assert await edge.raw("SELECT * FROM approval_policies") == before
