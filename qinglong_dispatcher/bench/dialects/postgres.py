"""The bench on PostgreSQL: scratch databases, a raw commit loop, seeded rows and the server's
counters (`PostgresBench`)."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib import parse

import asyncpg

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.postgres import driver_errors
from qinglong_dispatcher.bench.dialects import server_costs
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, installation

B = named_sql.load(Path(__file__).with_name("postgres.sql"))


def _with_database(url: str, name: str) -> str:
    parts = parse.urlsplit(url)
    return parse.urlunsplit(parts._replace(path="/" + name))


async def _admin(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, timeout=10)
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc


async def create_scratch(admin_url: str) -> str:
    """CREATE DATABASE a fresh scratch database; its URL (same server and credentials)."""
    name = f"qinglong_bench_{secrets.token_hex(4)}"
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()
    return _with_database(admin_url, name)


async def drop_scratch(admin_url: str, scratch_url: str) -> None:
    """Drop the scratch database (terminating anything still connected to it), then the roles
    `migrate` created for it: the scratch database is an installation of its own."""
    name = parse.urlsplit(scratch_url).path.lstrip("/")
    if not name.startswith("qinglong_bench_"):
        raise errors.InvalidInput("refusing to drop a database the bench did not create")
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        # The principals' roles the policy phase made (`<scratch>_p_<name>`) go too.
        made = await conn.fetch(B["principal_roles"], f"{name}_p_%")
        for role in [*(row["rolname"] for row in made), *installation.roles(name)]:
            await conn.execute(f"DROP ROLE IF EXISTS {role}")
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()


async def raw_commits_per_s(url: str, seconds: float) -> float:
    """BEGIN / one-row UPDATE / COMMIT on one asyncpg connection, for `seconds`."""
    conn = await _admin(url)
    try:
        await conn.execute(B["create_counter"])
        await conn.execute(B["seed_counter"])
        bump = B["bump_counter"]
        count = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            async with conn.transaction():
                await conn.execute(bump)
            count += 1
        return count / (time.perf_counter() - started)
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()


async def seed_terminal_rows(url: str, rows: int, now_ms: int) -> None:
    """`rows` succeeded executions and their dispatches, without approval rows (bench only)."""
    conn = await _admin(url)
    try:
        async with conn.transaction():
            # Superuser-only: skips the foreign-key, approval (0005) and state-machine (0006)
            # triggers for rows that exist only to be ignored by the due scan.
            await conn.execute("SET LOCAL session_replication_role = replica")
            await conn.execute(B["seed_terminal_dispatches"], rows, now_ms)
            await conn.execute(B["seed_terminal_executions"], now_ms)
        await conn.execute("ANALYZE qinglong.approved_action_dispatch_executions")
    except driver_errors.DRIVER_ERRORS as exc:
        raise driver_errors.translate(exc) from exc
    finally:
        await conn.close()


class PostgresBench:
    """`dialects.DialectBench` for PostgreSQL."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @contextlib.asynccontextmanager
    async def scratch_database(self) -> AsyncIterator[str]:
        """A database created through `database_url` (an administrator URL), then dropped."""
        url = await create_scratch(self.settings.database_url)
        try:
            await server_costs.track_functions(url)
            yield url
        finally:
            await drop_scratch(self.settings.database_url, url)

    async def raw_commits(self, seconds: float) -> tuple[float, float | None]:
        """One asyncpg connection's commit loop; there is no second driver to compare."""
        return await raw_commits_per_s(self.settings.database_url, seconds), None

    async def seed_terminal_rows(self, seeded: ports.Store, rows: int, now_ms: int) -> None:
        """See `seed_terminal_rows` (through the administrator URL, not `seeded`)."""
        await seed_terminal_rows(self.settings.database_url, rows, now_ms)

    async def write_policy(self, approvals: int) -> None:
        """See `dialects.DialectBench.write_policy`: the administrator URL owns the schema."""
        conn = await _admin(self.settings.database_url)
        try:
            await conn.execute(B["write_policy"], approvals)
        except driver_errors.DRIVER_ERRORS as exc:
            raise driver_errors.translate(exc) from exc
        finally:
            await conn.close()

    async def server_counters(self) -> dict[str, Any] | None:
        """See `server_costs.snapshot` (`database_url` is the scratch database)."""
        return await server_costs.snapshot(self.settings.database_url)
