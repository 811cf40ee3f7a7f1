"""`SqliteStore`: the edge implementation of every store port, over the one connection."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from pathlib import Path

import anyio.to_thread

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.adapters.sqlite import database, migrations
from qinglong_dispatcher.adapters.sqlite_file import access, integrity, os_user, reserve, space
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import (
    errors,
    principals,
    schema,
)
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables


class SqliteStore(sql_store.SqlStore):
    """Every operation is one hop to the connection's thread; writes are BEGIN IMMEDIATE."""

    dialect = "sqlite"

    def __init__(
        self,
        db: database.Database,
        *,
        tables: action_tables.BuiltInTables,
        self_approval: bool = True,
        api_self_approval: bool = False,
        principal: str | None = None,
        envelopes: plan_envelopes.Envelopes | None = None,
    ) -> None:
        self.db = db
        # A token's principal is never the file's owner: whether it may approve its own
        # requests is its own setting, off by default as a principal role is on PostgreSQL.
        self.api_self_approval = api_self_approval
        super().__init__(
            db,
            approval_records.Principal(
                name=os_user.os_principal() if principal is None else principal,
                self_approval=self_approval,
            ),
            envelopes,
            tables=tables,
        )

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        tables: action_tables.BuiltInTables,
        busy_timeout_s: float = 5.0,
        self_approval: bool = True,
        api_self_approval: bool = False,
        principal: str | None = None,
        create: bool = True,
        envelopes: plan_envelopes.Envelopes | None = None,
        reserve_bytes: int = 0,
    ) -> SqliteStore:
        """Open the SQLite file with the production pragmas (creating it only with `create`),
        with a disk reserve of `reserve_bytes` (`reserve.Reserve`; the daemon makes it)."""
        db = await database.Database.open(
            path, tables.statements, busy_timeout_s=busy_timeout_s, create=create
        )
        db.reserve = reserve.Reserve(path, reserve_bytes)
        return cls(
            db,
            tables=tables,
            self_approval=self_approval,
            api_self_approval=api_self_approval,
            principal=principal,
            envelopes=envelopes,
        )

    async def acting_as(self, who: principals.Authenticated) -> ports.ActingStore:
        """See `ports.PrincipalStores.acting_as`: the same connection, recording `who` (not the
        OS user) and applying its token's role and the API's self-approval setting
        (`QINGLONG_API_SELF_APPROVAL`, not the OS user's)."""
        principal = approval_records.Principal(
            name=who.principal, self_approval=self.api_self_approval, role=who.role.value
        )
        return sql_store.SqlStore(self.db, principal, self.envelopes, tables=self.tables)

    async def close(self) -> None:
        """Close the connection."""
        await self.db.close()

    # -- schema --------------------------------------------------------------------------

    async def migrate(self, *, now_ms: int) -> list[int]:
        """Apply pending migrations; returns the versions applied now."""
        return await self.db.read(functools.partial(migrations.migrate, now_ms=now_ms))

    async def schema_state(self) -> schema.SchemaState:
        """How the file's schema compares with this release."""
        return await self.db.read(migrations.state)

    async def check_durability(self) -> None:
        """Refuse a connection that lost WAL or synchronous=FULL."""

        def read(conn: sqlite3.Connection) -> tuple[str, int]:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
            return str(mode), int(sync)

        mode, sync = await self.db.read(read)
        if mode.lower() != "wal" or sync < 2:
            raise errors.DurabilityRefused(
                f"SQLite must run WAL with synchronous=FULL (got {mode}, synchronous={sync})"
            )

    async def check_integrity(self) -> None:
        """Refuse a damaged file (see `integrity.quick_check`), naming it."""
        try:
            problem = await self.db.read(integrity.quick_check)
        except errors.StoreCorrupted as exc:
            problem = str(exc)
        if problem is not None:
            raise errors.StoreCorrupted(
                f"SQLite file {self.db.path} is damaged ({problem}); restore it from a backup"
            )

    async def write_problem(self) -> str:
        """See `ports.Store.write_problem`: the file, its WAL and folder (`access.write_problem`),
        then the free space and the disk reserve, made again here once there is room
        (`reserve.Reserve.problem`; a thread of its own: it may write the reserve). While
        space is low it first folds the WAL in, so the WAL does not eat what is left."""
        if problem := access.write_problem(self.db.path):
            return problem
        if await anyio.to_thread.run_sync(self.db.reserve.low):
            with contextlib.suppress(errors.StoreError):  # a closed store: nothing to fold
                await self.db.read(reserve.checkpoint)
        return await anyio.to_thread.run_sync(self.db.reserve.problem)

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """None to report: on an edge device file permissions are the only authority."""
        return ()

    async def public_privileges(self) -> tuple[str, ...]:
        """None: a SQLite file has no logins."""
        return ()

    @property
    def commits(self) -> int:
        """Write transactions committed through the connection."""
        return self.db.commits

    @property
    def worker_costs(self) -> dict[str, float] | None:
        """See `ports.Store.worker_costs`: the worker thread's CPU and wall time, rows changed."""
        return self.db.worker_costs()

    async def reclaim_space(self, *, max_pages: int) -> int:
        """See `ports.PruneStore.reclaim_space`: SQLite's incremental vacuum."""
        return await self.db.read(functools.partial(space.incremental_vacuum, max_pages=max_pages))
