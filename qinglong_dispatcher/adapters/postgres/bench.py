"""What the benchmark needs from PostgreSQL: a scratch database, raw commit loops, seeded rows."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from urllib import parse

import asyncpg

from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.postgres import database
from qinglong_dispatcher.domain import errors, installation

B = named_sql.load(Path(__file__).with_name("bench.sql"))


def _with_database(url: str, name: str) -> str:
    parts = parse.urlsplit(url)
    return parse.urlunsplit(parts._replace(path="/" + name))


async def _admin(url: str) -> asyncpg.Connection:
    try:
        return await asyncpg.connect(url, timeout=10)
    except database.DRIVER_ERRORS as exc:
        raise database.translate(exc) from exc


async def create_scratch(admin_url: str) -> str:
    """CREATE DATABASE a fresh scratch database; its URL (same server and credentials)."""
    name = f"qinglong_bench_{secrets.token_hex(4)}"
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    except database.DRIVER_ERRORS as exc:
        raise database.translate(exc) from exc
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
        for role in installation.roles(name):
            await conn.execute(f"DROP ROLE IF EXISTS {role}")
    except database.DRIVER_ERRORS as exc:
        raise database.translate(exc) from exc
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
    except database.DRIVER_ERRORS as exc:
        raise database.translate(exc) from exc
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
    except database.DRIVER_ERRORS as exc:
        raise database.translate(exc) from exc
    finally:
        await conn.close()
