"""`PostgresStore`: the cluster implementation of every store port, over a small asyncpg pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import fast_paths, migrations, principals, replication
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import (
    errors,
    installation,
    records,
    schema,
)
from qinglong_dispatcher.domain import principals as principal_records
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables

T = TypeVar("T")

ASYNC_COMMIT_LEVELS = frozenset({"off", "local"})
"""`synchronous_commit` values that can lose an acknowledged commit (a start barrier)."""

_PUBLIC_PRIVILEGES = """
SELECT pg_catalog.has_database_privilege('public', pg_catalog.current_database(), 'TEMP')
           AS temp,
       pg_catalog.has_database_privilege('public', pg_catalog.current_database(), 'CREATE')
           AS create
"""

_DDL_CAPABILITIES = f"""
SELECT r.rolsuper AS superuser,
       (SELECT o.rolname FROM pg_catalog.pg_namespace AS n
        JOIN pg_catalog.pg_roles AS o ON o.oid = n.nspowner
        WHERE n.nspname = '{migrations.SCHEMA}'
          AND pg_catalog.pg_has_role(current_user, n.nspowner, 'MEMBER')) AS migrator,
       COALESCE((SELECT pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')
                        OR pg_catalog.has_schema_privilege(n.oid, 'CREATE')
                 FROM pg_catalog.pg_namespace AS n
                 WHERE n.nspname = '{migrations.SCHEMA}'), false) AS schema_create,
       pg_catalog.has_database_privilege(current_database(), 'CREATE') AS database_create
FROM pg_catalog.pg_roles AS r
WHERE r.rolname = current_user
"""
"""The schema's owner is the installation's migrator: membership in it is the capability."""


class PostgresStore(sql_store.SqlStore):
    """Every operation is one short transaction on a pooled connection."""

    dialect = "postgres"

    def __init__(
        self,
        database: db.Database,
        *,
        tables: action_tables.BuiltInTables,
        allow_async_commit: bool = False,
        require_sync_standby: bool = False,
        installation: str | None = None,
        envelopes: plan_envelopes.Envelopes | None = None,
    ) -> None:
        self.db = database
        self.installation = installation
        """The installation a new database is migrated for (None: the database's name)."""
        super().__init__(database, approval_records.DATABASE_PRINCIPAL, envelopes, tables=tables)
        self.allow_async_commit = allow_async_commit
        self.require_sync_standby = require_sync_standby
        self._installation_name: str | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        tables: action_tables.BuiltInTables,
        allow_async_commit: bool = False,
        require_sync_standby: bool = False,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout_s: float = 30.0,
        lock_timeout_s: float = 5.0,
        idle_in_transaction_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        installation: str | None = None,
        envelopes: plan_envelopes.Envelopes | None = None,
    ) -> PostgresStore:
        """Open a pool on `url` (postgresql://…); fails typed when the server cannot be used."""
        config = db.PoolConfig(
            min_size=min_size,
            max_size=max_size,
            statement_timeout_s=statement_timeout_s,
            lock_timeout_s=lock_timeout_s,
            idle_in_transaction_timeout_s=idle_in_transaction_timeout_s,
            connect_timeout_s=connect_timeout_s,
        )
        return cls(
            await db.Database.open(url, config, tables.statements),
            tables=tables,
            allow_async_commit=allow_async_commit,
            require_sync_standby=require_sync_standby,
            installation=installation,
            envelopes=envelopes,
        )

    async def close(self) -> None:
        """Close the pool."""
        await self.db.close()

    @property
    def commits(self) -> int:
        """Write transactions committed through the pool."""
        return self.db.commits

    @property
    def worker_costs(self) -> dict[str, float] | None:
        """None: the server's own counters say what a dispatch costs (the bench reads them)."""
        return None

    # -- schema and startup checks ---------------------------------------------------------

    async def migrate(self, *, now_ms: int) -> list[int]:
        """Apply pending migrations as the migrator; needs an administrator connection."""
        async with self.db.session() as conn:
            return await migrations.migrate(
                conn, now_ms=now_ms, requested_installation=self.installation
            )

    async def schema_state(self) -> schema.SchemaState:
        """How the database's schema compares with this release."""
        return await self.db.read(migrations.state)

    async def check_durability(self) -> None:
        """Refuse `synchronous_commit` off/local unless the operator opted out explicitly;
        with `require_sync_standby`, refuse a primary without a synchronous standby too."""

        async def read(conn: db.Connection) -> str:
            return str(await conn.fetchval("SHOW synchronous_commit"))

        level = await self.db.read(read)
        if level.lower() in ASYNC_COMMIT_LEVELS and not self.allow_async_commit:
            raise errors.DurabilityRefused(
                f"PostgreSQL synchronous_commit is {level}: an acknowledged start barrier could "
                "be lost; fix the server setting or set QINGLONG_ALLOW_ASYNC_COMMIT=true"
            )
        if self.require_sync_standby:
            await replication.require_sync_standby(self.db)

    async def check_integrity(self) -> None:
        """Nothing to do: the server checks its own pages (data checksums, WAL replay)."""

    async def reclaim_space(self, *, max_pages: int) -> int:
        """See `ports.PruneStore.reclaim_space`: autovacuum reuses the space, nothing to do."""
        return 0

    async def write_problem(self) -> str:
        """Nothing known ahead: a server that refuses writes (a standby, a full disk) fails
        the claim itself, and the daemon's readiness follows that failure."""
        return ""

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """Why the connected role could change the schema; empty for a proper runtime role.

        `run` should connect as a login role that is a member of the installation's runtime
        role only; any reason returned here deserves a warning at startup (not a refusal).
        """

        async def read(conn: db.Connection) -> tuple[str, ...]:
            row = await conn.fetchrow(_DDL_CAPABILITIES)
            if row is None:
                return ()
            reasons = {
                "superuser": "superuser",
                "migrator": f"member of {row['migrator']}",
                "schema_create": f"CREATE on schema {migrations.SCHEMA}",
                "database_create": "CREATE on the database",
            }
            return tuple(text for column, text in reasons.items() if row[column])

        return await self.db.read(read)

    async def public_privileges(self) -> tuple[str, ...]:
        """See `ports.Store.public_privileges`."""

        async def read(conn: db.Connection) -> tuple[str, ...]:
            row = await conn.fetchrow(_PUBLIC_PRIVILEGES)
            return tuple(p for p in ("TEMP", "CREATE") if row is not None and row[p.lower()])

        return await self.db.read(read)

    # -- API principals (`principals`) -------------------------------------------------------

    async def create_token(
        self, new: principal_records.NewToken, *, groups: Sequence[str] = ()
    ) -> principal_records.Token:
        """See `ports.TokenStore.create_token`: also the principal's role, and the groups'
        roles granted to it; an administrator's."""
        return await principals.create_token(self.db, new, groups=groups)

    async def approver_groups(self) -> dict[str, list[str]]:
        """See `ports.TokenStore.approver_groups`: the groups' roles granted to principals'."""
        return await principals.approver_groups(self.db)

    async def revoke_token(self, token_id: str) -> principal_records.Token | None:
        """See `ports.TokenStore.revoke_token` (the principal's role leaves the API's role once
        it holds no live token)."""
        return await principals.revoke_token(self.db, token_id)

    async def acting_as(self, who: principal_records.Authenticated) -> ports.ActingStore:
        """See `ports.PrincipalStores.acting_as`: every transaction `SET LOCAL ROLE` first."""
        if self._installation_name is None:
            self._installation_name = await principals.installation_name(self.db)
        role = installation.principal_role(self._installation_name, who.principal)
        runner = principals.PrincipalRunner(self.db, role)
        return sql_store.SqlStore(
            runner, approval_records.DATABASE_PRINCIPAL, self.envelopes, tables=self.tables
        )

    # -- the start barrier -------------------------------------------------------------------

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        """See `ports.ExecutionStore.start`.

        One item (what the dispatcher sends) first tries the one-statement happy path; anything
        else — a replay, a lost lease, a wrong binding, several items — goes to the shared
        transaction.
        """
        if len(requests) == 1:
            started = await fast_paths.start_fast(
                self.db, requests[0], now_ms=now_ms, lease_ms=lease_ms
            )
            if started is not None:
                return [started]
        return await super().start(requests, now_ms=now_ms, lease_ms=lease_ms)

    # -- submit ----------------------------------------------------------------------------

    async def submit_sealed(
        self,
        sealed: Sequence[approval_records.NewApproval],
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> list[approval_records.Consumed]:
        """One plan first tries the one-round-trip submit (`fast_paths.submit_fast`: the
        database judges every row, as in the shared transaction); a batch, or a submit it
        declined, runs the shared transaction."""
        if len(sealed) == 1:
            done = await fast_paths.submit_fast(
                self.db,
                sealed[0],
                approved_by=approved_by,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
            if done is not None:
                return [done]
        return await super().submit_sealed(
            sealed, approved_by=approved_by, now_ms=now_ms, max_attempts=max_attempts
        )

    # -- what a built-in action's repository runs on (`ports.action_tables.StoreHost`) -----

    async def fast_statement(self, name: str, params: query.Params) -> Any:
        """One statement as its own transaction, one round trip (`Database.statement`): its
        row when it wrote, None when it matched nothing (the caller runs its transaction)."""
        return await self.db.statement(name, params)
