"""UI sessions in the store, on both dialects through the daemon's login (the runtime on
PostgreSQL): kept as the digest of the cookie value only, ended by sign-out, by revoking the
token (in its transaction), by the idle time and the lifetime on the database's clock; one
principal keeps at most its newest sessions, and a sign-in sweeps ended rows, bounded."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import principals, ui_sessions
from qinglong_dispatcher.web.ui import sessions
from tests.support import stores


@contextlib.asynccontextmanager
async def _admin(harness: stores.Harness) -> AsyncIterator[ports.Store]:
    """Who creates and revokes tokens: the file's owner on SQLite, the administrator on
    PostgreSQL."""
    if harness.dialect == "sqlite":
        yield harness.store
        return
    database = str(await harness.scalar("SELECT current_database()"))
    admin = await stores.open_postgres(stores.pg_url(database), max_size=1)
    try:
        yield admin
    finally:
        made = [f"{stores.INSTALLATION}_p_{t.principal}" for t in await admin.list_tokens()]
        await admin.close()
        await stores.drop_roles(*made)


async def _token(admin: ports.Store, who: str) -> principals.Authenticated:
    name = stores.session_principal(f"{who}_{time.monotonic_ns() % 10**9}")
    new, _secret = principals.NewToken.issue(
        principal=name, role=principals.TokenRole.VIEWER, ttl_ms=3_600_000, created_by="a"
    )
    token = await admin.create_token(new)
    return principals.Authenticated(
        token_id=token.token_id, principal=name, role=principals.TokenRole.VIEWER
    )


def _table(harness: stores.Harness) -> str:
    return "ui_sessions" if harness.dialect == "sqlite" else "qinglong.ui_sessions"


async def test_a_session_is_kept_as_a_digest_and_ends_at_sign_out_everywhere(
    harness: stores.Harness,
) -> None:
    async with _admin(harness) as admin:
        who = await _token(admin, "ann")
        one = sessions.Sessions(harness.store)
        other = sessions.Sessions(harness.store)  # another daemon on the same store
        opened = await one.open(who)
        assert len(opened.session_id) >= 43
        assert opened.csrf not in (opened.session_id, ui_sessions.digest(opened.session_id))
        stored = await harness.raw(f"SELECT * FROM {_table(harness)}")
        assert [r["session_sha256"] for r in stored] == [ui_sessions.digest(opened.session_id)]
        assert opened.session_id not in repr(stored)
        assert opened.csrf not in repr(stored)
        found = await other.find(opened.session_id)
        assert found is not None
        assert (found.principal, found.csrf) == (who, opened.csrf)
        assert await other.find(opened.session_id + "x") is None
        assert await other.find(None) is None
        assert await other.find("") is None
        await other.close(opened.session_id)
        assert await one.find(opened.session_id) is None
        two, three = await one.open(who), await one.open(who)
        assert len(await other.of_principal(who.principal)) == 2
        await other.close_all(who.principal)
        assert await one.find(two.session_id) is None
        assert await one.find(three.session_id) is None


async def test_revoking_the_token_ends_its_sessions_in_its_transaction(
    harness: stores.Harness,
) -> None:
    async with _admin(harness) as admin:
        who = await _token(admin, "rev")
        kept = sessions.Sessions(harness.store)
        opened = await kept.open(who)
        assert await kept.find(opened.session_id) is not None
        await admin.revoke_token(who.token_id)
        assert await kept.find(opened.session_id) is None
        (row,) = await harness.raw(f"SELECT revoked_at_ms FROM {_table(harness)}")
        assert row["revoked_at_ms"] is not None  # the row itself, not only the token's


async def test_a_session_ends_idle_or_at_its_lifetime_on_the_database_clock(
    harness: stores.Harness,
) -> None:
    async with _admin(harness) as admin:
        who = await _token(admin, "idle")
        idle = sessions.Sessions(harness.store, idle_s=0.6, lifetime_s=60)
        opened = await idle.open(who)
        for _ in range(3):  # used: the idle deadline moves on
            await anyio.sleep(0.3)
            assert await idle.find(opened.session_id) is not None
        await anyio.sleep(0.8)
        assert await idle.find(opened.session_id) is None
        brief = sessions.Sessions(harness.store, idle_s=60, lifetime_s=0.5)
        busy = await brief.open(who)
        for _ in range(2):
            await anyio.sleep(0.2)
            assert await brief.find(busy.session_id) is not None
        await anyio.sleep(0.3)
        assert await brief.find(busy.session_id) is None  # the lifetime, however busy


async def test_one_principal_keeps_its_newest_and_a_sign_in_sweeps_ended_rows(
    harness: stores.Harness,
) -> None:
    async with _admin(harness) as admin:
        who, them = await _token(admin, "many"), await _token(admin, "them")
        kept = sessions.Sessions(harness.store)
        theirs = await kept.open(them)
        mine = [await kept.open(who) for _ in range(sessions.MAX_PER_PRINCIPAL + 4)]
        assert await kept.find(theirs.session_id) is not None
        assert await kept.find(mine[0].session_id) is None
        assert await kept.find(mine[-1].session_id) is not None
        assert len(await kept.of_principal(who.principal)) == sessions.MAX_PER_PRINCIPAL
        table = _table(harness)
        # Ended rows beyond one sweep's bound: each sign-in deletes at most SWEEP_LIMIT.
        values = ", ".join(
            f"('{secrets.token_hex(32)}', '{who.token_id}', '{who.principal}', 1, 1, 1, 2, 1)"
            for _ in range(ui_sessions.SWEEP_LIMIT + 10)
        )
        await harness.raw(
            f"INSERT INTO {table} (session_sha256, token_id, principal, created_at_ms,"
            " last_seen_at_ms, idle_ms, expires_at_ms, revoked_at_ms) VALUES " + values
        )
        before = await harness.scalar(f"SELECT count(*) FROM {table}")
        await kept.open(them)
        after = await harness.scalar(f"SELECT count(*) FROM {table}")
        assert after == before + 1 - ui_sessions.SWEEP_LIMIT
        await kept.open(them)
        assert await kept.find(mine[-1].session_id) is not None  # live rows are never swept
