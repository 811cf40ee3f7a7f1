"""`PostgresStore`: the cluster implementation of every store port, over a small asyncpg pool."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from qinglong_dispatcher import ports, tool_ports
from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres import (
    executions,
    migrations,
    recovery,
    runs,
    tool_barriers,
    tool_steps,
)
from qinglong_dispatcher.adapters.postgres.queries import Q
from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import (
    errors,
    records,
    schema,
    steps,
    tool_barrier_checks,
    tool_start,
)
from qinglong_dispatcher.domain import recovery as recovery_records
from qinglong_dispatcher.domain import runs as run_records

ASYNC_COMMIT_LEVELS = frozenset({"off", "local"})
"""`synchronous_commit` values that can lose an acknowledged commit (a start barrier)."""

_DDL_CAPABILITIES = f"""
SELECT r.rolsuper AS superuser,
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{migrations.MIGRATOR}')
            THEN pg_catalog.pg_has_role(current_user, '{migrations.MIGRATOR}', 'MEMBER')
            ELSE false END AS migrator,
       COALESCE((SELECT pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')
                        OR pg_catalog.has_schema_privilege(n.oid, 'CREATE')
                 FROM pg_catalog.pg_namespace AS n
                 WHERE n.nspname = '{migrations.SCHEMA}'), false) AS schema_create,
       pg_catalog.has_database_privilege(current_database(), 'CREATE') AS database_create
FROM pg_catalog.pg_roles AS r
WHERE r.rolname = current_user
"""


class PostgresStore(sql_store.SqlStore):
    """Every operation is one short transaction on a pooled connection."""

    dialect = "postgres"

    def __init__(self, database: db.Database, *, allow_async_commit: bool = False) -> None:
        self.db = database
        super().__init__(database, approval_records.DATABASE_PRINCIPAL)
        self.allow_async_commit = allow_async_commit

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        allow_async_commit: bool = False,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout_s: float = 30.0,
        lock_timeout_s: float = 5.0,
        idle_in_transaction_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
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
        return cls(await db.Database.open(url, config), allow_async_commit=allow_async_commit)

    async def close(self) -> None:
        """Close the pool."""
        await self.db.close()

    @property
    def commits(self) -> int:
        """Write transactions committed through the pool."""
        return self.db.commits

    # -- schema and startup checks ---------------------------------------------------------

    async def migrate(self, *, now_ms: int) -> list[int]:
        """Apply pending migrations as the migrator; needs an administrator connection."""
        async with self.db.session() as conn:
            return await migrations.migrate(conn, now_ms=now_ms)

    async def schema_state(self) -> schema.SchemaState:
        """How the database's schema compares with this release."""
        return await self.db.read(migrations.state)

    async def check_durability(self) -> None:
        """Refuse `synchronous_commit` off/local unless the operator opted out explicitly."""

        async def read(conn: db.Connection) -> str:
            return str(await conn.fetchval("SHOW synchronous_commit"))

        level = await self.db.read(read)
        if level.lower() in ASYNC_COMMIT_LEVELS and not self.allow_async_commit:
            raise errors.DurabilityRefused(
                f"PostgreSQL synchronous_commit is {level}: an acknowledged start barrier could "
                "be lost; fix the server setting or set QINGLONG_ALLOW_ASYNC_COMMIT=true"
            )

    async def database_now_ms(self) -> int:
        """The database server's wall clock (for the skew guard), in epoch milliseconds."""

        async def read(conn: db.Connection) -> int:
            return int((await db.fetchrow(conn, Q["database_now"], {}))["now_ms"])

        return await self.db.read(read)

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """Why the connected role could change the schema; empty for a proper runtime role.

        `run` should connect as a login role that is a member of `qinglong_runtime` only; any
        reason returned here deserves a warning at startup (it is not a refusal).
        """

        async def read(conn: db.Connection) -> tuple[str, ...]:
            row = await conn.fetchrow(_DDL_CAPABILITIES)
            if row is None:
                return ()
            reasons = {
                "superuser": "superuser",
                "migrator": f"member of {migrations.MIGRATOR}",
                "schema_create": f"CREATE on schema {migrations.SCHEMA}",
                "database_create": "CREATE on the database",
            }
            return tuple(text for column, text in reasons.items() if row[column])

        return await self.db.read(read)

    # -- executions ----------------------------------------------------------------------

    async def claim_due(
        self, *, now_ms: int, owner: str, limit: int, lease_ms: int
    ) -> records.ClaimBatch:
        """See `ports.ExecutionStore.claim_due`."""
        return await self.db.write(
            functools.partial(
                executions.claim_due, now_ms=now_ms, owner=owner, limit=limit, lease_ms=lease_ms
            )
        )

    async def claim(
        self, dispatch_id: str, *, now_ms: int, owner: str, token: str, lease_ms: int
    ) -> records.Claim:
        """See `ports.ExecutionStore.claim`."""
        return await self.db.write(
            functools.partial(
                executions.claim,
                dispatch_id=dispatch_id,
                now_ms=now_ms,
                owner=owner,
                token=token,
                lease_ms=lease_ms,
            )
        )

    async def renew(self, lease: records.Lease, *, now_ms: int, lease_ms: int) -> records.Renewal:
        """See `ports.ExecutionStore.renew`."""
        return await self.db.write(
            functools.partial(executions.renew, lease=lease, now_ms=now_ms, lease_ms=lease_ms)
        )

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        """See `ports.ExecutionStore.start`.

        One item (what the dispatcher sends) first tries the one-statement happy path; anything
        else — a replay, a lost lease, a wrong binding — goes to the diagnosing transaction.
        """
        if len(requests) == 1:
            started = await executions.start_fast(
                self.db, requests[0], now_ms=now_ms, lease_ms=lease_ms
            )
            if started is not None:
                return [started]
        return await self.db.write(
            functools.partial(
                executions.start, requests=tuple(requests), now_ms=now_ms, lease_ms=lease_ms
            )
        )

    async def list_due(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[records.Execution]:
        """See `ports.ExecutionStore.list_due`."""
        return await self.db.read(
            functools.partial(executions.list_due, now_ms=now_ms, limit=limit, after=after)
        )

    async def counts(self, *, now_ms: int) -> records.StatusCounts:
        """See `ports.ExecutionStore.counts` (with StepRuns per status)."""

        async def read(conn: db.Connection) -> records.StatusCounts:
            counts = await executions.counts(conn, now_ms=now_ms)
            return dataclasses.replace(counts, step_runs=await tool_steps.count_by_status(conn))

        return await self.db.read(read)

    async def backlog(self, *, now_ms: int, cap: int = ports.BACKLOG_CAP) -> records.Backlog:
        """See `ports.ExecutionStore.backlog`."""
        return await self.db.read(functools.partial(executions.backlog, now_ms=now_ms, cap=cap))

    async def get_execution(self, dispatch_id: str) -> records.Execution | None:
        """See `ports.ExecutionStore.get_execution`."""
        found = await self.db.read(functools.partial(executions.read_row, dispatch_id=dispatch_id))
        return None if found is None else found[0]

    async def get_dispatch(self, dispatch_id: str) -> records.Dispatch | None:
        """See `ports.ExecutionStore.get_dispatch`."""
        found = await self.db.read(functools.partial(executions.read_row, dispatch_id=dispatch_id))
        return None if found is None else found[1]

    async def execution_events(self, dispatch_id: str) -> list[records.ExecutionEvent]:
        """See `ports.ExecutionStore.execution_events`."""
        return await self.db.read(functools.partial(executions.events, dispatch_id=dispatch_id))

    # -- plans and run.create ------------------------------------------------------------

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan | None:
        """See `ports.PlanStore.get_plan`."""

        async def read(conn: db.Connection) -> ports.StoredPlan | None:
            row = await db.fetchrow(
                conn, Q["select_plan"], {"project_id": project_id, "action_ref": action_ref}
            )
            if row is None:
                return None
            return ports.StoredPlan.from_row(row)

        return await self.db.read(read)

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        """See `ports.PlanStore.get_plans`."""
        params = {"project_ids": [k[0] for k in keys], "action_refs": [k[1] for k in keys]}

        async def read(conn: db.Connection) -> list[ports.StoredPlan]:
            return [
                ports.StoredPlan.from_row(row)
                for row in await db.fetch(conn, Q["select_plans"], params)
            ]

        return await self.db.read(read)

    async def create_run(self, request: ports.RunCreateRequest) -> ports.RunCreateResult:
        """See `ports.RunCreateRepository.create_run` (the happy path is one statement)."""
        created = await runs.create_run_fast(self.db, request)
        if created is not None:
            return created
        try:
            return await self.db.write(functools.partial(runs.create_run, request=request))
        except runs.FencedEffect as fenced:
            return ports.RunCreateResult(
                outcome=ports.RunCreateOutcome.FENCED, reason=fenced.reason
            )

    async def get_receipt(self, dispatch_id: str) -> run_records.RunReceipt | None:
        """See `ports.RunCreateRepository.get_receipt`."""
        return await self.db.read(functools.partial(runs.get_receipt, dispatch_id=dispatch_id))

    async def get_run_by_key(self, project_id: str, idempotency_key: str) -> run_records.Run | None:
        """See `ports.RunCreateRepository.get_run_by_key`."""
        return await self.db.read(
            functools.partial(
                runs.get_run_by_key, project_id=project_id, idempotency_key=idempotency_key
            )
        )

    async def get_run(self, run_id: str) -> run_records.Run | None:
        """See `ports.RunCreateRepository.get_run`."""
        return await self.db.read(functools.partial(runs.get_run, run_id=run_id))

    # -- recovery ------------------------------------------------------------------------

    async def list_recovery_required(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[recovery_records.Snapshot]:
        """See `ports.RecoveryStore.list_recovery_required`."""
        return await self.db.read(
            functools.partial(
                recovery.list_recovery_required, now_ms=now_ms, limit=limit, after=after
            )
        )

    async def resolve_recovery(
        self, resolution: recovery_records.Resolution, *, now_ms: int
    ) -> records.Transition:
        """See `ports.RecoveryStore.resolve_recovery`."""
        return await self.db.write(
            functools.partial(recovery.resolve, resolution=resolution, now_ms=now_ms)
        )

    async def record_observation(
        self,
        dispatch_id: str,
        *,
        outcome: recovery_records.ObservationOutcome,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """See `ports.RecoveryStore.record_observation`."""
        await self.db.write(
            functools.partial(
                recovery.record_observation,
                dispatch_id=dispatch_id,
                outcome=outcome,
                reason_code=reason_code,
                now_ms=now_ms,
            )
        )

    async def get_resolution(self, dispatch_id: str) -> recovery_records.StoredResolution | None:
        """See `ports.RecoveryStore.get_resolution`."""
        return await self.db.read(
            functools.partial(recovery.get_resolution, dispatch_id=dispatch_id)
        )

    async def audit_events(self, subject_id: str) -> list[recovery_records.AuditEvent]:
        """See `ports.RecoveryStore.audit_events`."""
        return await self.db.read(functools.partial(recovery.audit_events, subject_id=subject_id))

    # -- tool steps and the start barrier (ADR-0158) --------------------------------------

    async def create_step_run(self, step: steps.NewStepRun, *, now_ms: int) -> steps.StepRun:
        """See `tool_ports.ToolStepRepository.create_step_run`."""
        return await self.db.write(functools.partial(tool_steps.create, new=step, now_ms=now_ms))

    async def get_step_run(self, step_run_id: str) -> steps.StepRun | None:
        """See `tool_ports.ToolStepRepository.get_step_run`."""
        return await self.db.read(functools.partial(tool_steps.get, step_run_id=step_run_id))

    async def step_run_mutations(self, step_run_id: str) -> list[steps.Mutation]:
        """See `tool_ports.ToolStepRepository.step_run_mutations`."""
        return await self.db.read(functools.partial(tool_steps.mutations, step_run_id=step_run_id))

    async def submit_tool_invocation(
        self,
        new: approval_records.NewApproval,
        step: steps.NewStepRun,
        *,
        approved_by: str,
        now_ms: int,
        max_attempts: int,
    ) -> approval_records.Consumed:
        """See `tool_ports.ToolStepRepository.submit_tool_invocation`."""
        return await self.db.write(
            functools.partial(
                tool_steps.submit,
                new=new,
                step=step,
                approved_by=approved_by,
                now_ms=now_ms,
                max_attempts=max_attempts,
            )
        )

    async def complete_tool_step(
        self, request: tool_ports.ToolStepCompletion
    ) -> tool_ports.ToolStepCompletionResult:
        """See `tool_ports.ToolStepRepository.complete_tool_step`."""
        try:
            return await self.db.write(functools.partial(tool_steps.complete, request=request))
        except tool_steps.Refused as refused:
            return tool_ports.ToolStepCompletionResult(
                outcome=tool_ports.ToolStepOutcome.FENCED, reason=refused.reason
            )

    async def prepare(self, command: tool_start.StartCommand) -> tool_ports.StartBarrierResult:
        """See `tool_ports.ToolExecutionStartBarrierRepository.prepare` (SERIALIZABLE)."""
        try:
            return await self.db.write(
                functools.partial(tool_barriers.prepare, command=command),
                isolation="serializable",
            )
        except tool_steps.Refused as refused:
            return tool_ports.StartBarrierResult(
                outcome=tool_ports.StartOutcome.CONFLICT, reason=refused.reason
            )

    async def get_by_start_id(self, start_id: str) -> tool_barrier_checks.StoredBarrier | None:
        """See `tool_ports.ToolExecutionStartBarrierRepository.get_by_start_id`."""
        return await self.db.read(
            functools.partial(tool_barriers.get_by_start_id, start_id=start_id)
        )

    async def get_by_started_step_run_version(
        self, run_id: str, step_run_id: str, started_version: int
    ) -> tool_barrier_checks.StoredBarrier | None:
        """See `tool_ports.ToolExecutionStartBarrierRepository.get_by_started_step_run_version`."""
        return await self.db.read(
            functools.partial(
                tool_barriers.get_by_started_version,
                run_id=run_id,
                step_run_id=step_run_id,
                started_version=started_version,
            )
        )
