"""The PostgreSQL migration runner: idempotent, locked, checksummed, and run by an administrator."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest

from qinglong_dispatcher.adapters import migration_files
from qinglong_dispatcher.adapters.installation_roles import kinds
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.domain import errors, installation
from tests.support import stores
from tests.support.clock import START_MS

pytestmark = pytest.mark.postgres

ALL = [m.version for m in migration_files.load("postgres")]


@pytest.fixture
async def empty() -> AsyncIterator[str]:
    async with stores.fresh_database(migrated=False) as name:
        yield name


async def _admin(database: str) -> postgres_store.PostgresStore:
    return await stores.open_postgres(
        stores.pg_url(database), max_size=2, installation=stores.INSTALLATION
    )


async def test_migrate_applies_everything_once_and_then_is_a_no_op(empty: str) -> None:
    runtime = await stores.open_postgres(stores.runtime_url(empty), max_size=1)
    admin = await _admin(empty)
    try:
        before = await runtime.schema_state()
        assert [m.version for m in before.pending] == ALL
        with pytest.raises(errors.SchemaNotMigrated):
            before.require_current()
        assert await admin.migrate(now_ms=START_MS) == ALL
        assert await admin.migrate(now_ms=START_MS) == []
        assert (await runtime.schema_state()).current
    finally:
        await runtime.close()
        await admin.close()


async def test_a_database_owner_with_createrole_can_migrate_without_superuser(empty: str) -> None:
    owner = stores.session_login("owner")
    conn = await asyncpg.connect(stores.admin_dsn())
    try:
        await conn.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
            f"'{owner}') THEN BEGIN CREATE ROLE {owner} LOGIN CREATEROLE PASSWORD "
            f"'{stores.LOGIN_PASSWORD}'; EXCEPTION WHEN duplicate_object OR unique_violation THEN "
            "NULL; END; END IF; END $$"
        )
        await conn.execute(f"ALTER DATABASE {empty} OWNER TO {owner}")
    finally:
        await conn.close()
    store = await stores.open_postgres(
        stores.pg_url(empty, login=owner), max_size=1, installation=stores.INSTALLATION
    )
    try:
        assert await store.migrate(now_ms=START_MS) == ALL
        assert "superuser" not in await store.ddl_capabilities()
    finally:
        await store.close()
    owners = await stores.raw(
        empty,
        "SELECT DISTINCT pg_get_userbyid(relowner) AS owner FROM pg_class "
        "WHERE relnamespace = 'qinglong'::regnamespace",
    )
    assert [r["owner"] for r in owners] == ["qinglong_migrator"]


async def test_the_runtime_role_cannot_migrate(empty: str) -> None:
    runtime = await stores.open_postgres(stores.runtime_url(empty), max_size=1)
    try:
        with pytest.raises(errors.StoreError, match="administrator") as caught:
            await runtime.migrate(now_ms=START_MS)
        assert caught.value.code == "permission_denied"
    finally:
        await runtime.close()


async def test_a_tampered_checksum_is_refused_and_reported(empty: str) -> None:
    admin = await _admin(empty)
    try:
        await admin.migrate(now_ms=START_MS)
        await stores.raw(
            empty, "UPDATE qinglong.schema_migrations SET checksum = 'x' WHERE version = 1"
        )
        state = await admin.schema_state()
        assert state.tampered == (1,)
        with pytest.raises(errors.SchemaTampered):
            state.require_current()
        with pytest.raises(errors.SchemaTampered):
            await admin.migrate(now_ms=START_MS)
    finally:
        await admin.close()


async def test_a_newer_schema_is_refused(empty: str) -> None:
    admin = await _admin(empty)
    try:
        await admin.migrate(now_ms=START_MS)
        await stores.raw(
            empty,
            "INSERT INTO qinglong.schema_migrations VALUES (9999, 'future', 'x', 0)",
        )
        assert (await admin.schema_state()).unknown == (9999,)
        with pytest.raises(errors.SchemaTooNew):
            await admin.migrate(now_ms=START_MS)
    finally:
        await admin.close()


async def test_two_migrates_of_one_database_take_turns(empty: str) -> None:
    first, second = await _admin(empty), await _admin(empty)
    results: list[list[int]] = []
    try:

        async def run(store: postgres_store.PostgresStore) -> None:
            results.append(await store.migrate(now_ms=START_MS))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, first)
            tg.start_soon(run, second)
    finally:
        await first.close()
        await second.close()
    assert sorted(results) == [[], ALL]


async def test_two_databases_of_one_server_migrate_at_once() -> None:
    async with (
        stores.fresh_database(migrated=False) as one,
        stores.fresh_database(migrated=False) as two,
    ):
        admins = [await _admin(one), await _admin(two)]
        results: list[list[int]] = []
        try:

            async def run(store: postgres_store.PostgresStore) -> None:
                results.append(await store.migrate(now_ms=START_MS))

            async with anyio.create_task_group() as tg:
                for admin in admins:
                    tg.start_soon(run, admin)
        finally:
            for admin in admins:
                await admin.close()
        assert results == [ALL, ALL]


async def test_concurrent_role_creation_swallows_the_losers_duplicate() -> None:
    # Roles are cluster-wide and already exist here, so race fresh throw-away names instead.
    await stores.require_server()
    names = tuple(f"qinglong_race_{os.getpid()}_{i}" for i in range(4))
    marks = {name: installation.role_mark("race", name) for name in names}
    conns = [await asyncpg.connect(stores.admin_dsn()) for _ in range(3)]
    try:
        for _ in range(3):
            async with anyio.create_task_group() as tg:
                for conn in conns:
                    tg.start_soon(kinds.ensure_roles, conn, marks)
            found = await conns[0].fetch(
                "SELECT rolname, rolcanlogin, shobj_description(oid, 'pg_authid') AS mark "
                "FROM pg_roles WHERE rolname = ANY($1::text[])",
                list(names),
            )
            assert {r["rolname"] for r in found} == set(names)
            assert not any(r["rolcanlogin"] for r in found)
            # Whoever won created each role marked: none is ever seen unmarked.
            assert {r["rolname"]: r["mark"] for r in found} == marks
            for name in names:
                await conns[0].execute(f"DROP ROLE {name}")
    finally:
        for name in names:
            await conns[0].execute(f"DROP ROLE IF EXISTS {name}")
        for conn in conns:
            await conn.close()


def test_migration_numbers_are_contiguous_and_match_sqlite() -> None:
    postgres = migration_files.load("postgres")
    sqlite = migration_files.load("sqlite")
    assert [m.version for m in postgres] == list(range(1, len(postgres) + 1))
    assert [(m.version, m.name) for m in postgres] == [(m.version, m.name) for m in sqlite]
