"""Real stores for the contract suite: a migrated SQLite file per test, and a fresh PostgreSQL
database per test, cloned from a template migrated once per session."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import itertools
import os
import re
import secrets
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib import parse

import anyio.to_thread
import asyncpg
import pytest

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.adapters.postgres import store as postgres_store
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.domain import installation
from tests.support.clock import START_MS

DIALECTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

TABLES = bootstrap.builtin_tables()
"""The built-in actions' tables, lent to every store a test opens (as the daemon's are)."""

open_sqlite = functools.partial(sqlite_store.SqliteStore.open, tables=TABLES)
"""`SqliteStore.open`, lent the built-in actions' tables."""

open_postgres = functools.partial(postgres_store.PostgresStore.open, tables=TABLES)
"""`PostgresStore.open`, lent the built-in actions' tables."""


@dataclasses.dataclass
class Harness:
    """A store plus raw SQL for setting up faults the product must survive.

    `store` is the daemon's (the runtime login on PostgreSQL); `operator_store` is what an
    operator resolving recovery by hand uses: on PostgreSQL a pool opened with the operator
    login on the same database (docs/operations.md), on SQLite the same store (the OS user is the
    principal there). `open_operator` opens one more operator connection, for races.
    `approver_store` seeds dispatches (`submit` is a self-approval, which the runtime login
    may never make): on PostgreSQL a login in `qinglong_approver` and
    `qinglong_self_approver`, on SQLite the same store.
    """

    dialect: str
    store: ports.Store
    raw: Callable[[str], Awaitable[list[dict[str, Any]]]]
    open_another: Callable[[], Awaitable[ports.Store]]
    operator_store: ports.Store
    open_operator: Callable[[], Awaitable[ports.Store]]
    approver_store: ports.Store
    pruner_store: ports.Store | None = None
    """What `prune` runs as: on PostgreSQL a login in `qinglong_pruner`; on SQLite the store."""
    open_owner: Callable[[], Awaitable[ports.Store]] | None = None
    """A store of the schema's owner (`migrate`, `keys rotate`): on PostgreSQL the
    administrator's login; on SQLite another store of the file."""

    async def owner(self) -> ports.Store:
        """A new owner's store (closed with the harness)."""
        assert self.open_owner is not None
        return await self.open_owner()

    async def register_plan_keys(self, *key_ids: str) -> None:
        """Register `key_ids` as the owner does (`migrate` with the ring configured)."""
        table = "plan_keys" if self.dialect == "sqlite" else "qinglong.plan_keys"
        for key_id in key_ids:
            await self.raw(
                f"INSERT INTO {table} (key_id, registered_at_ms) VALUES ('{key_id}', 0) "
                "ON CONFLICT (key_id) DO NOTHING"
            )

    async def scalar(self, sql: str) -> Any:
        """First column of the first row."""
        rows = await self.raw(sql)
        return next(iter(rows[0].values())) if rows else None


async def _sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Harness, list[ports.Store]]:
    path = tmp_path_factory.mktemp("sqlite") / "store.db"
    store = await open_sqlite(path, busy_timeout_s=5.0)
    await store.migrate(now_ms=START_MS)
    opened: list[ports.Store] = [store]

    async def raw(sql: str) -> list[dict[str, Any]]:
        # A separate plain connection: driver errors reach the test untranslated.
        def body() -> list[dict[str, Any]]:
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            conn.row_factory = sqlite3.Row
            try:
                cursor = conn.execute(sql)
                return [dict(r) for r in cursor.fetchall()] if cursor.description else []
            finally:
                conn.close()

        return await anyio.to_thread.run_sync(body)

    async def another() -> ports.Store:
        other = await open_sqlite(path, busy_timeout_s=5.0)
        opened.append(other)
        return other

    return Harness("sqlite", store, raw, another, store, another, store, store, another), opened


# -- PostgreSQL ----------------------------------------------------------------------------

PG_DSN_ENV = "QINGLONG_TEST_PG_DSN"
INSTALLATION = "qinglong"
"""The installation of every database the suite migrates (the legacy one: its roles are
`qinglong_runtime`, …); a CLI test that migrates a new database passes it as
QINGLONG_INSTALLATION."""
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_SESSION_TAG = f"{os.getpid()}_{secrets.token_hex(3)}"
"""Roles are server-wide: this session's logins carry its pid (a crashed session's are
dropped by the next one) and a random part, and are dropped when the session ends."""
LOGIN_PASSWORD = secrets.token_hex(16)
"""Every test login's password: random per session, never written anywhere."""
_OUR_ROLE = re.compile(r"^(?:qinglong_p_)?qlt_(\d+)_[0-9a-f]{6}_[a-z0-9_]+$")
"""A login, session installation's role or session principal's role of the session `pid`."""
_EARLIER_LOGINS = tuple(
    f"qinglong_test_{kind}"
    for kind in ("runtime", "operator", "approver", "strict_approver", "pruner")
)
"""The fixed-name logins, their password once written in the repository, that earlier
releases of these tests left behind: dropped by name, never by a pattern."""
_SESSION_LOGINS: set[str] = set()


def session_login(purpose: str) -> str:
    """A login name of this session (dropped at its end, pass or fail)."""
    name = f"qlt_{_SESSION_TAG}_{purpose}"
    _SESSION_LOGINS.add(name)
    return name


def session_installation(purpose: str) -> str:
    """An installation name of this session: its roles are dropped at its end like logins."""
    name = f"qlt_{_SESSION_TAG}_{purpose}"
    _SESSION_LOGINS.update(installation.roles(name))
    return name


def session_principal(purpose: str) -> str:
    """An API principal's name of this session; its role in the suite's installation
    (`qinglong_p_<name>`, made by `token create`) is dropped at its end like a login."""
    name = f"qlt_{_SESSION_TAG}_{purpose}"
    _SESSION_LOGINS.add(f"{INSTALLATION}_p_{name}")
    return name


async def drop_roles(*names: str) -> None:
    """Drop roles a test made (principal roles: server-wide), whatever the test's outcome."""
    conn = await _admin_connect()
    try:
        for name in names:
            with contextlib.suppress(asyncpg.PostgresError):
                await conn.execute(f'DROP ROLE IF EXISTS "{name}"')
    finally:
        await conn.close()


RUNTIME_LOGIN = session_login("runtime")
OPERATOR_LOGIN = session_login("operator")
APPROVER_LOGIN = session_login("approver")
"""In `qinglong_approver` and `qinglong_self_approver`: may approve its own requests."""
STRICT_APPROVER_LOGIN = session_login("strict_approver")
"""In `qinglong_approver` only: separation of duties applies to it."""
PRUNER_LOGIN = session_login("pruner")
"""In `qinglong_pruner` only: the one login that may delete (finished trees)."""
_OURS = re.compile(r"^qinglong_(?:tpl|t)_(\d+)(?:_\d+)?$")


def admin_dsn() -> str:
    """The administrator DSN of the test server (a superuser: it creates databases)."""
    return os.environ.get(PG_DSN_ENV) or DEFAULT_PG_DSN


def pg_url(database: str, *, login: str | None = None) -> str:
    """The test DSN pointed at `database`, as the administrator or as a test login role."""
    parts = parse.urlsplit(admin_dsn())
    netloc = parts.netloc
    if login is not None:
        host = netloc.rpartition("@")[2]
        netloc = f"{login}:{LOGIN_PASSWORD}@{host}"
    return parse.urlunsplit(parts._replace(netloc=netloc, path=f"/{database}"))


def runtime_url(database: str) -> str:
    """A login that is a member of `qinglong_runtime` only: the grants must suffice."""
    return pg_url(database, login=RUNTIME_LOGIN)


def operator_url(database: str) -> str:
    """A login that is a member of `qinglong_operator` only."""
    return pg_url(database, login=OPERATOR_LOGIN)


def approver_url(database: str) -> str:
    """A login in `qinglong_approver` and `qinglong_self_approver`: it may `submit`."""
    return pg_url(database, login=APPROVER_LOGIN)


def pruner_url(database: str) -> str:
    """A login that is a member of `qinglong_pruner` only."""
    return pg_url(database, login=PRUNER_LOGIN)


def strict_approver_url(database: str) -> str:
    """A login in `qinglong_approver` only: it may approve others' requests, not its own."""
    return pg_url(database, login=STRICT_APPROVER_LOGIN)


@dataclasses.dataclass
class _PgSession:
    """Process-wide state of the PostgreSQL leg (each test has its own event loop)."""

    checked: bool = False
    unreachable: str | None = None
    set_up_error: str | None = None
    template: str | None = None
    numbers: itertools.count[int] = dataclasses.field(default_factory=itertools.count)


_PG = _PgSession()


async def _admin_connect(database: str | None = None) -> Any:
    dsn = admin_dsn() if database is None else pg_url(database)
    return await asyncpg.connect(dsn, timeout=5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _drop_stale(conn: Any) -> None:
    """Drop databases left by test sessions that died (their pid is gone)."""
    # Only names a test session makes (the server is shared; PostgreSQL's regular expressions
    # read these patterns as Python does).
    for row in await conn.fetch(
        "SELECT datname FROM pg_database WHERE datname ~ $1 OR datname ~ $2",
        _OURS.pattern,
        _OUR_ROLE.pattern,
    ):
        match = _OURS.match(row["datname"]) or _OUR_ROLE.match(row["datname"])
        if match and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1))):
            await conn.execute(f'DROP DATABASE IF EXISTS "{row["datname"]}" WITH (FORCE)')


async def _drop_stale_logins(conn: Any) -> None:
    """Drop the roles of test sessions that died (only names a session makes: roles are
    server-wide, and another installation's may begin like ours), and `_EARLIER_LOGINS`."""
    for row in await conn.fetch(
        "SELECT rolname FROM pg_roles WHERE rolname ~ $1 OR rolname = ANY($2::text[])",
        _OUR_ROLE.pattern,
        list(_EARLIER_LOGINS),
    ):
        name = row["rolname"]
        match = _OUR_ROLE.match(name)
        if name not in _EARLIER_LOGINS and (
            match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1)))
        ):
            continue
        with contextlib.suppress(asyncpg.PostgresError):
            await conn.execute(f'DROP ROLE IF EXISTS "{name}"')


def _drop_logins_at_exit() -> None:
    async def drop() -> None:
        conn = await _admin_connect()
        try:
            for name in sorted(_SESSION_LOGINS):
                with contextlib.suppress(asyncpg.PostgresError):
                    await conn.execute(f'DROP ROLE IF EXISTS "{name}"')
        finally:
            await conn.close()

    with contextlib.suppress(Exception):
        asyncio.run(drop())


def _login_sql(login: str, member_of: str) -> str:
    # Roles are cluster-wide and another test session may create them at the same moment.
    return f"""
DO $login$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN
        BEGIN
            CREATE ROLE {login} LOGIN PASSWORD '{LOGIN_PASSWORD}';
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
    IF NOT pg_has_role('{login}', '{member_of}', 'MEMBER') THEN
        BEGIN
            GRANT {member_of} TO {login};
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END IF;
END
$login$"""


async def _set_up_session() -> str:
    conn = await _admin_connect()
    try:
        await _drop_stale(conn)
        await _drop_stale_logins(conn)
        template = f"qinglong_tpl_{os.getpid()}"
        await conn.execute(f"DROP DATABASE IF EXISTS {template} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {template}")
        # atexit runs last-in first-out: the databases go first, then the logins.
        atexit.register(_drop_logins_at_exit)
        atexit.register(_drop_at_exit, template)
        # The suite's databases are all of the legacy installation, so their roles are the
        # documented `qinglong_*`; tests of installation names make and drop their own.
        store = await open_postgres(pg_url(template), max_size=1, installation=INSTALLATION)
        try:
            await store.migrate(now_ms=START_MS)
        finally:
            await store.close()
        await conn.execute(_login_sql(RUNTIME_LOGIN, "qinglong_runtime"))
        await conn.execute(_login_sql(OPERATOR_LOGIN, "qinglong_operator"))
        await conn.execute(_login_sql(APPROVER_LOGIN, "qinglong_approver"))
        await conn.execute(_login_sql(APPROVER_LOGIN, "qinglong_self_approver"))
        await conn.execute(_login_sql(STRICT_APPROVER_LOGIN, "qinglong_approver"))
        await conn.execute(_login_sql(PRUNER_LOGIN, "qinglong_pruner"))
        return template
    finally:
        await conn.close()


def _drop_at_exit(template: str) -> None:
    async def drop() -> None:
        conn = await _admin_connect()
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {template} WITH (FORCE)")
        finally:
            await conn.close()

    with contextlib.suppress(Exception):
        asyncio.run(drop())


def _redacted(dsn: str) -> str:
    parts = parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    return parse.urlunsplit(parts._replace(netloc=parts.netloc.replace(parts.password, "***")))


async def require_server() -> str:
    """The migrated template; skips the test when no server answers (fails it with CI=true).

    Only an unreachable server skips: a server that answers but cannot be set up (a broken
    migration, missing privileges) fails every PostgreSQL test, loudly.
    """
    if not _PG.checked:
        _PG.checked = True
        try:
            await (await _admin_connect()).close()
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            _PG.unreachable = (
                f"no usable PostgreSQL at {PG_DSN_ENV}={_redacted(admin_dsn())} "
                f"({exc.__class__.__name__}: {exc})"
            )
        else:
            try:
                _PG.template = await _set_up_session()
            except Exception as exc:
                _PG.set_up_error = f"{exc.__class__.__name__}: {exc}"
                raise
    if _PG.unreachable is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true, so the PostgreSQL leg may not skip: {_PG.unreachable}")
        pytest.skip(_PG.unreachable)
    if _PG.template is None:
        pytest.fail(f"the PostgreSQL test session could not be set up: {_PG.set_up_error}")
    return _PG.template


@contextlib.asynccontextmanager
async def _database(name: str, *, template: str | None, drop_roles: bool) -> AsyncIterator[str]:
    """Create database `name` (a clone of `template`, or empty); drop it afterwards and, with
    `drop_roles`, the roles of the installation a `migrate` made named after it."""
    conn = await _admin_connect()
    try:
        # The default strategy (WAL_LOG) measured faster here than FILE_COPY, whose checkpoint
        # costs more than copying the few pages of a migrated template through the WAL.
        clause = f" TEMPLATE {template}" if template is not None else ""
        await conn.execute(f"CREATE DATABASE {name}{clause}")
    finally:
        await conn.close()
    try:
        yield name
    finally:
        conn = await _admin_connect()
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            if drop_roles:
                for role in installation.roles(name):
                    with contextlib.suppress(asyncpg.PostgresError):
                        await conn.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await conn.close()


@contextlib.asynccontextmanager
async def fresh_database(*, migrated: bool = True) -> AsyncIterator[str]:
    """A new database (a clone of the migrated template, or empty), dropped afterwards."""
    template = await require_server()
    name = f"qinglong_t_{os.getpid()}_{next(_PG.numbers)}"
    # A `migrate` of an empty one without the suite's installation makes one named after it.
    async with _database(
        name, template=template if migrated else None, drop_roles=not migrated
    ) as created:
        yield created


@contextlib.asynccontextmanager
async def installation_database(purpose: str) -> AsyncIterator[str]:
    """A new empty database named as a session installation (so `migrate` makes it one of its
    own name), dropped afterwards with the roles `migrate` created for it."""
    await require_server()
    async with _database(session_installation(purpose), template=None, drop_roles=True) as name:
        yield name


async def create_login(login: str, *member_of: str) -> None:
    """Create the session login `login` (from `session_login`) as a member of `member_of`."""
    conn = await _admin_connect()
    try:
        for role in member_of:
            await conn.execute(_login_sql(login, role))
    finally:
        await conn.close()


async def as_login(url: str, sql: str) -> list[Any]:
    """Run SQL on a fresh connection as whoever `url` names; driver errors reach the caller."""
    conn = await asyncpg.connect(url, timeout=5)
    try:
        rows: list[Any] = await conn.fetch(sql)
        return rows
    finally:
        await conn.close()


async def raw(database: str, sql: str) -> list[dict[str, Any]]:
    """Run SQL as the administrator on its own connection; driver errors reach the caller."""
    conn = await _admin_connect(database)
    try:
        return [dict(row.items()) for row in await conn.fetch(sql)]
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _postgres() -> AsyncIterator[tuple[Harness, list[ports.Store]]]:
    async with fresh_database() as database:
        url = runtime_url(database)
        store = await open_postgres(url, max_size=4)
        opened: list[ports.Store] = [store]
        try:
            operator = await open_postgres(operator_url(database), max_size=2)
        except BaseException:
            await store.close()
            raise
        opened.append(operator)
        try:
            approver = await open_postgres(approver_url(database), max_size=2)
        except BaseException:
            for each in opened:
                await each.close()
            raise
        opened.append(approver)
        try:
            pruner = await open_postgres(pruner_url(database), max_size=1)
        except BaseException:
            for each in opened:
                await each.close()
            raise
        opened.append(pruner)

        async def raw_sql(sql: str) -> list[dict[str, Any]]:
            return await raw(database, sql)

        async def another() -> ports.Store:
            other = await open_postgres(url, max_size=4)
            opened.append(other)
            return other

        async def another_operator() -> ports.Store:
            other = await open_postgres(operator_url(database), max_size=2)
            opened.append(other)
            return other

        async def owner() -> ports.Store:
            other = await open_postgres(pg_url(database), max_size=2)
            opened.append(other)
            return other

        try:
            yield (
                Harness(
                    "postgres",
                    store,
                    raw_sql,
                    another,
                    operator,
                    another_operator,
                    approver,
                    pruner,
                    owner,
                ),
                opened,
            )
        finally:
            # Close before the database is dropped, even when a test failed.
            for each in opened:
                await each.close()
            opened.clear()


@contextlib.asynccontextmanager
async def open_harness(
    dialect: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Harness]:
    """Open a fresh store of `dialect` and close everything it opened afterwards."""
    if dialect == "postgres":
        async with _postgres() as (harness, _opened):
            yield harness
        return
    if dialect != "sqlite":  # pragma: no cover - a typo in a parametrisation
        raise AssertionError(f"unknown dialect {dialect}")
    harness, opened = await _sqlite(tmp_path_factory)
    try:
        yield harness
    finally:
        for store in opened:
            await store.close()
