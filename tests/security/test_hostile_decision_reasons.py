"""Why a decided request went as it did, attacked on PostgreSQL from plain logins of this
session, each holding only the role the docs give it (docs/security.md): a viewer reads the
reasons of decided requests through `qinglong.decision_reasons` and nothing more of the votes
or the audit table; a role the grant leaves out may not call it; a comment is one line, kept in the
write's own audit row under the acting principal, never written for another.

The requests are decided through the real API (real tokens, real principals), then each attack
runs as a raw login and asserts the database's own refusal (its SQLSTATE) and that nothing
changed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from tests.support import stores
from tests.support.api_writes import Served, serving
from tests.support.api_writes import submit as api_submit

pytestmark = pytest.mark.postgres

VIEWER = stores.session_login("dr_viewer")
APPROVER = stores.session_login("dr_approver")
PRUNER = stores.session_login("dr_pruner")
OPERATOR = stores.session_login("dr_operator")
AUDIT = "qinglong.security_audit_events"


@pytest.fixture
async def served(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving("postgres", tmp_path_factory, tmp_path) as it:
        yield it


async def _decided(it: Served) -> tuple[str, str, str]:
    """A rejected request (reason and comment), a denied one (a vote's reason), a pending one."""
    rejected = (await api_submit(it, "sam", "t1"))["approval_request_id"]
    denied = (await api_submit(it, "sam", "t2"))["approval_request_id"]
    pending = (await api_submit(it, "sam", "t3"))["approval_request_id"]
    answer = await it.call(
        "POST", f"/approvals/{rejected}/reject", "alice", {"reason": "dup", "comment": "seen"}
    )
    assert answer[0] == 200, answer
    answer = await it.call(
        "POST", f"/approvals/{denied}/votes", "bob", {"vote": "deny", "reason": "not now"}
    )
    assert answer[0] == 200, answer
    return rejected, denied, pending


async def _as(url: str, sql: str) -> tuple[str | None, list[asyncpg.Record]]:
    """Run `sql` as `url`'s login: the SQLSTATE it was refused with (or None) and its rows."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            return None, list(await conn.fetch(sql))
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate), []
    finally:
        await conn.close()


async def test_a_viewer_reads_the_reasons_and_nothing_else_of_votes_or_audit(
    served: Served,
) -> None:
    it = served
    rejected, denied, pending = await _decided(it)
    database = str(await it.harness.scalar("SELECT current_database()"))
    await stores.create_login(VIEWER, "qinglong_viewer")
    await stores.create_login(PRUNER, "qinglong_pruner")
    viewer = stores.pg_url(database, login=VIEWER)
    pruner = stores.pg_url(database, login=PRUNER)

    for table in ("qinglong.approval_votes", AUDIT):
        assert await _as(viewer, f"SELECT * FROM {table}") == ("42501", [])
        assert await _as(viewer, f"SELECT reason FROM {table} LIMIT 1") in (
            ("42501", []),
            ("42703", []),  # the audit table has no such column: refused before any grant
        )
    call = "SELECT * FROM qinglong.decision_reasons('{0}')"
    refused, rows = await _as(viewer, call.format(rejected))
    assert refused is None
    assert [dict(r) for r in rows] == [
        {"decision": "reject", "principal": it.names["alice"], "reason": "dup", "comment": "seen"}
    ]
    refused, rows = await _as(viewer, call.format(denied))
    assert [dict(r) for r in rows] == [
        {"decision": "deny", "principal": it.names["bob"], "reason": "not now", "comment": None}
    ]
    # A pending request's votes stay unread (they would tell the requester who stands where).
    assert await _as(viewer, call.format(pending)) == (None, [])
    # A role the grant leaves out (the pruner reads requests, not why) may not call it.
    assert (await _as(pruner, call.format(rejected)))[0] == "42501"
    # Nor may a viewer make it its own.
    assert (
        await _as(
            viewer,
            "ALTER FUNCTION qinglong.decision_reasons(text) SET search_path = public",
        )
    )[0] == "42501"


async def test_a_comment_is_one_line_of_the_acting_principal(served: Served) -> None:
    it = served
    rejected, _, _ = await _decided(it)
    database = str(await it.harness.scalar("SELECT current_database()"))
    await stores.create_login(APPROVER, "qinglong_approver")
    approver = stores.pg_url(database, login=APPROVER)
    await stores.create_login(VIEWER, "qinglong_viewer")
    viewer = stores.pg_url(database, login=VIEWER)
    await stores.create_login(OPERATOR, "qinglong_operator")
    operator = stores.pg_url(database, login=OPERATOR)
    before = await it.harness.raw(f"SELECT * FROM {AUDIT} ORDER BY event_id")

    def forged(principal: str, comment: str, *, api: bool = True) -> str:
        kind, token, request = ("api.reject", f"'{it.token_ids['alice']}'", "'r1'")
        if not api:  # the shape an operator's login may write for itself
            kind, token, request = ("recovery.note", "NULL", "NULL")
        return (
            f"INSERT INTO {AUDIT} (kind, actor, principal, project_id, subject_id, "
            "detail_code, committed_at_ms, token_id, request_id, comment) VALUES "
            f"('{kind}', 'x', '{principal}', 'proj-1', '{rejected}', 'dup', 0, "
            f"{token}, {request}, '{comment}')"
        )

    # A comment written for another principal (the approver it was not).
    assert (await _as(approver, forged(it.names["alice"], "forged")))[0] == "QLI01"
    # A viewer writes no audit row at all.
    assert (await _as(viewer, forged(VIEWER, "mine")))[0] == "42501"
    # Two lines are refused by the table's own check, even under the login's own name.
    assert (await _as(operator, forged(OPERATOR, "two' || chr(10) || 'lines", api=False)))[
        0
    ] == "23514"
    assert await it.harness.raw(f"SELECT * FROM {AUDIT} ORDER BY event_id") == before
    # The same row on one line is the database's to accept: the refusals above are the rules'.
    assert (await _as(operator, forged(OPERATOR, "one line", api=False)))[0] is None
