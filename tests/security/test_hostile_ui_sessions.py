"""Attacks on the UI's sessions in the store: no login (the runtime, which opens and revokes
them, included) changes a session's principal, token or times, moves its last use back, or
un-revokes it; the API's login reads and writes none. Each asserts the refusal and that nothing
changed."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import principals, ui_sessions
from qinglong_dispatcher.web.ui import sessions
from tests.support import refusals, stores

API_LOGIN = stores.session_login("ui_api_login")

CHANGES = (
    "principal = 'mallory'",
    "token_id = 'tok_ffffffffffffffff'",
    "expires_at_ms = expires_at_ms + 86400000",
    "idle_ms = idle_ms + 86400000",
    "created_at_ms = created_at_ms + 1",
)
"""Columns no login's grant reaches (the runtime: 42501) and the trigger refuses to anyone."""


async def _opened(h: stores.Harness, admin_url: str | None) -> tuple[str, str]:
    """A live session and a revoked one (their digests) of a new viewer token."""
    name = stores.session_principal("uiv")
    new, _ = principals.NewToken.issue(
        principal=name, role=principals.TokenRole.VIEWER, ttl_ms=3_600_000, created_by="t"
    )
    if admin_url is None:
        await h.store.create_token(new)
    else:
        admin = await stores.open_postgres(admin_url, max_size=1)
        try:
            await admin.create_token(new)
        finally:
            await admin.close()
    who = principals.Authenticated(token_id=new.token_id, principal=name, role=new.role)
    kept = sessions.Sessions(h.store)
    live, ended = await kept.open(who), await kept.open(who)
    await kept.close(ended.session_id)
    return ui_sessions.digest(live.session_id), ui_sessions.digest(ended.session_id)


@pytest.mark.postgres
async def test_no_login_rewrites_or_revives_a_session_on_postgres(pg: stores.Harness) -> None:
    database = str(await pg.scalar("SELECT current_database()"))
    live, ended = await _opened(pg, stores.pg_url(database))
    before = await pg.raw("SELECT * FROM qinglong.ui_sessions ORDER BY session_sha256")
    runtime, owner = stores.runtime_url(database), stores.pg_url(database)
    for change in CHANGES:
        sql = f"UPDATE qinglong.ui_sessions SET {change} WHERE session_sha256 = '{live}'"
        assert await refusals.sqlstate_as(runtime, sql) == "42501", change
        assert await refusals.sqlstate_as(owner, sql) == "QLI01", change
    back = (
        "UPDATE qinglong.ui_sessions SET last_seen_at_ms = last_seen_at_ms - 1"
        f" WHERE session_sha256 = '{live}'"
    )
    revive = (
        f"UPDATE qinglong.ui_sessions SET revoked_at_ms = NULL WHERE session_sha256 = '{ended}'"
    )
    for login in (runtime, owner):
        assert await refusals.sqlstate_as(login, back) == "QLI01"
        assert await refusals.sqlstate_as(login, revive) == "QLI01"
    await stores.create_login(API_LOGIN, "qinglong_api")
    api = stores.pg_url(database, login=API_LOGIN)
    assert await refusals.sqlstate_as(api, "SELECT * FROM qinglong.ui_sessions") == "42501"
    assert await refusals.sqlstate_as(api, revive) == "42501"
    after = await pg.raw("SELECT * FROM qinglong.ui_sessions ORDER BY session_sha256")
    assert after == before


async def test_no_writer_rewrites_or_revives_a_session_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    async with stores.open_harness("sqlite", tmp_path_factory) as h:
        live, ended = await _opened(h, None)
        before = await h.raw("SELECT * FROM ui_sessions ORDER BY session_sha256")
        for change in (*CHANGES, "last_seen_at_ms = last_seen_at_ms - 1"):
            sql = f"UPDATE ui_sessions SET {change} WHERE session_sha256 = '{live}'"
            assert "ui_sessions: a session changes only" in await refusals.sqlite_abort(h, sql)
        revive = f"UPDATE ui_sessions SET revoked_at_ms = NULL WHERE session_sha256 = '{ended}'"
        assert "ui_sessions: a session changes only" in await refusals.sqlite_abort(h, revive)
        assert await h.raw("SELECT * FROM ui_sessions ORDER BY session_sha256") == before
