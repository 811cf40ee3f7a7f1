"""Notes on inbox rows, attacked on PostgreSQL from plain logins of this session, each holding
only the role the docs give it (docs/security.md): a viewer writes no note; an approver's or
an operator's login writes a note only under its own name (never for another principal), one
printable line, stamped with the database's time; nobody changes or deletes one.

Every attack asserts the database's own refusal (its SQLSTATE) and that nothing changed; the
product's own shape of the write is admitted, so a refusal is the rule's and not a typo's.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg
import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock

pytestmark = pytest.mark.postgres

NOTES = "qinglong.inbox_notes"
VIEWER = stores.session_login("nt_viewer")
APPROVER = stores.session_login("nt_approver")
OPERATOR = stores.session_login("nt_operator")


@pytest.fixture
async def logins(pg: stores.Harness) -> dict[str, str]:
    """A url per documented role, each login in that role only."""
    await stores.create_login(VIEWER, "qinglong_viewer")
    await stores.create_login(APPROVER, "qinglong_approver")
    await stores.create_login(OPERATOR, "qinglong_operator")
    database = str(await pg.scalar("SELECT current_database()"))
    return {
        "viewer": stores.pg_url(database, login=VIEWER),
        "approver": stores.pg_url(database, login=APPROVER),
        "operator": stores.pg_url(database, login=OPERATOR),
    }


async def _attempt(url: str, sql: str) -> str | None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        async with conn.transaction():
            await conn.execute(sql)
    except asyncpg.PostgresError as exc:
        return str(exc.sqlstate)
    finally:
        await conn.close()
    return None


async def _notes(pg: stores.Harness) -> list[Any]:
    return await pg.raw(f"SELECT * FROM {NOTES} ORDER BY note_id")


def _note(dispatch_id: str, principal: str, text_sql: str = "'checked the router'") -> str:
    return (
        f"INSERT INTO {NOTES} (dispatch_id, principal, note, written_at_ms) "
        f"VALUES ('{dispatch_id}', '{principal}', {text_sql}, 7)"
    )


async def test_a_note_is_written_only_under_the_writers_own_name(
    pg: stores.Harness, logins: dict[str, str]
) -> None:
    now = ManualClock(int(time.time() * 1000))
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    target = consumed.dispatch_id
    before = await _notes(pg)
    # A viewer writes none, under any name.
    assert await _attempt(logins["viewer"], _note(target, VIEWER)) == "42501"
    # An approver or an operator never writes one for another principal.
    assert await _attempt(logins["approver"], _note(target, OPERATOR)) == "QLI01"
    assert await _attempt(logins["operator"], _note(target, APPROVER)) == "QLI01"
    assert await _attempt(logins["operator"], _note(target, "alice")) == "QLI01"
    # A note is one printable line.
    two_lines = "'a' || chr(10) || 'b'"
    assert await _attempt(logins["operator"], _note(target, OPERATOR, two_lines)) == "23514"
    # One subject, exactly.
    neither = f"INSERT INTO {NOTES} (principal, note, written_at_ms) VALUES ('{OPERATOR}', 'x', 0)"
    assert await _attempt(logins["operator"], neither) == "23514"
    assert await _notes(pg) == before
    # The writer's own note is the database's to accept, stamped with its time.
    assert await _attempt(logins["operator"], _note(target, OPERATOR)) is None
    (row,) = await _notes(pg)
    assert (row["principal"], row["dispatch_id"]) == (OPERATOR, target)
    assert row["written_at_ms"] > 7


async def test_nobody_changes_or_deletes_a_note(pg: stores.Harness, logins: dict[str, str]) -> None:
    now = ManualClock(int(time.time() * 1000))
    (consumed,) = await submit_runs(pg.approver_store, now, 1)
    assert await _attempt(logins["approver"], _note(consumed.dispatch_id, APPROVER)) is None
    before = await _notes(pg)
    for login in ("viewer", "approver", "operator"):
        for sql in (
            f"UPDATE {NOTES} SET note = 'rewritten'",
            f"UPDATE {NOTES} SET principal = 'someone'",
            f"DELETE FROM {NOTES}",
            f"TRUNCATE {NOTES}",
        ):
            assert await _attempt(logins[login], sql) == "42501", (login, sql)
    # Not even the owner changes one (the statement trigger refuses it).
    with pytest.raises(asyncpg.PostgresError, match="inbox_notes is immutable"):
        await pg.raw(f"UPDATE {NOTES} SET note = 'rewritten'")
    assert await _notes(pg) == before
