"""The bench on SQLite: scratch files, raw commit loops and seeded rows (`SqliteBench`)."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.sqlite import database
from qinglong_dispatcher.adapters.sqlite import store as sqlite_store
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors

B = named_sql.load(Path(__file__).with_name("sqlite.sql"))

DISPATCH_GUARD = "approved_action_dispatches_insert_guard"
"""The trigger of migration 0005 that admits a dispatch only for its consumed approval."""

EXECUTION_GUARD = "approved_action_dispatch_executions_insert_state"
"""The trigger of migration 0006 that admits an execution only as pending@v0."""

LEDGER_ON_INSERT = "approved_action_dispatch_executions_ledger_insert"
"""The trigger of migration 0011 that writes a new execution's first ledger line (pending)."""


SCRATCH_PREFIX = "qinglong-bench-"
SCRATCH_FILE = "bench.db"


def create_scratch() -> tuple[str, Path]:
    """A fresh file in a new temporary folder: its `sqlite:////abs/path.db` URL and path."""
    path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX)) / SCRATCH_FILE
    return f"sqlite:///{path}", path


def drop_scratch(path: Path) -> None:
    """Remove a scratch file's folder, and only one `create_scratch` made."""
    folder = path.parent
    if path.name != SCRATCH_FILE or not folder.name.startswith(SCRATCH_PREFIX):
        raise errors.InvalidInput("refusing to remove a folder the bench did not create")
    shutil.rmtree(folder, ignore_errors=True)


def _prepare(conn: sqlite3.Connection) -> None:
    conn.execute(B["create_counter"])
    conn.execute(B["seed_counter"])


async def raw_commits(path: Path, seconds: float, *, busy_timeout_s: float) -> tuple[float, float]:
    """Commits per second through the store's own hop, then through plain stdlib sqlite3."""
    db = await database.Database.open(path, (), busy_timeout_s=busy_timeout_s, create=True)
    try:
        driver = await raw_commits_per_s(db, seconds)
    finally:
        await db.close()
    stdlib = await anyio.to_thread.run_sync(
        lambda: raw_commits_per_s_stdlib(path, seconds, busy_timeout_s=busy_timeout_s)
    )
    return driver, stdlib


async def raw_commits_per_s(db: database.Database, seconds: float) -> float:
    """BEGIN IMMEDIATE / one-row UPDATE / COMMIT through the store's own hop, for `seconds`."""
    await db.write(_prepare)
    bump = B["bump_counter"]

    def one(conn: sqlite3.Connection) -> None:
        conn.execute(bump)

    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        await db.write(one)
        count += 1
    return count / (time.perf_counter() - started)


def raw_commits_per_s_stdlib(path: Path, seconds: float, *, busy_timeout_s: float) -> float:
    """The same loop on a plain stdlib connection in this thread: closer to the disk's limit."""
    conn = database.connect(path, busy_timeout_s=busy_timeout_s)
    try:
        database.in_transaction(conn, _prepare)
        bump = B["bump_counter"]
        count = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(bump)
            conn.execute("COMMIT")
            count += 1
        return count / (time.perf_counter() - started)
    finally:
        conn.close()


async def seed_terminal_rows(store: sqlite_store.SqliteStore, rows: int, now_ms: int) -> None:
    """`rows` succeeded executions (and their dispatches) in one transaction."""

    def body(c: sqlite3.Connection) -> None:
        # Like PostgreSQL's replica mode: bench-only dispatches have no consumed approval and
        # their executions are born terminal, so the dispatch guard (migration 0005), the
        # execution insert check (0006) and its first ledger line (0011) step aside inside
        # this one transaction only.
        guards = [
            c.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)
            ).fetchone()[0]
            for name in (DISPATCH_GUARD, EXECUTION_GUARD, LEDGER_ON_INSERT)
        ]
        for name in (DISPATCH_GUARD, EXECUTION_GUARD, LEDGER_ON_INSERT):
            c.execute(f"DROP TRIGGER {name}")
        c.execute(B["seed_terminal_dispatches"], {"rows": rows, "now_ms": now_ms})
        c.execute(B["seed_terminal_executions"], {"now_ms": now_ms})
        for guard in guards:
            c.execute(guard)

    def seed(conn: sqlite3.Connection) -> None:
        # Bench-only rows carry no approval request: their foreign key is not the point here.
        conn.execute("PRAGMA foreign_keys = OFF")
        try:
            database.in_transaction(conn, body)
        finally:
            conn.execute("PRAGMA foreign_keys = ON")

    await store.db.read(seed)


class SqliteBench:
    """`dialects.DialectBench` for SQLite."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @contextlib.asynccontextmanager
    async def scratch_database(self) -> AsyncIterator[str]:
        """A file in a new temporary folder, removed with its folder."""
        url, path = create_scratch()
        try:
            yield url
        finally:
            drop_scratch(path)

    async def raw_commits(self, seconds: float) -> tuple[float, float | None]:
        """Through the store's own hop, then through plain stdlib sqlite3."""
        return await raw_commits(
            self.settings.sqlite_path,
            seconds,
            busy_timeout_s=self.settings.sqlite_busy_timeout_seconds,
        )

    async def seed_terminal_rows(self, seeded: ports.Store, rows: int, now_ms: int) -> None:
        """See `seed_terminal_rows`; `seeded` must be a SQLite store."""
        if not isinstance(seeded, sqlite_store.SqliteStore):
            raise errors.ConfigurationError("the SQLite bench seeds only a SQLite store")
        await seed_terminal_rows(seeded, rows, now_ms)

    async def write_policy(self, approvals: int) -> None:
        """See `dialects.DialectBench.write_policy`: the file's owner writes it."""

        def write() -> None:
            conn = sqlite3.connect(self.settings.sqlite_path)
            try:
                with conn:
                    conn.execute(B["write_policy"], {"approvals": approvals})
            finally:
                conn.close()

        await anyio.to_thread.run_sync(write)

    async def server_counters(self) -> dict[str, Any] | None:
        """None: no server; the replicas count their own writes (`Store.worker_costs`)."""
        return None
