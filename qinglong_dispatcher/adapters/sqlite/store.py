"""`SqliteStore`: the edge implementation of every store port, over the one connection."""

from __future__ import annotations

import dataclasses
import functools
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from qinglong_dispatcher import ports, tool_ports
from qinglong_dispatcher.adapters.sql import store as sql_store
from qinglong_dispatcher.adapters.sqlite import (
    database,
    executions,
    migrations,
    recovery,
    runs,
    tool_barriers,
    tool_steps,
)
from qinglong_dispatcher.adapters.sqlite.queries import Q
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


class SqliteStore(sql_store.SqlStore):
    """Every operation is one hop to the connection's thread; writes are BEGIN IMMEDIATE."""

    dialect = "sqlite"

    def __init__(
        self,
        db: database.Database,
        *,
        self_approval: bool = True,
        principal: str | None = None,
    ) -> None:
        self.db = db
        super().__init__(
            db,
            approval_records.Principal(
                name=recovery.os_principal() if principal is None else principal,
                self_approval=self_approval,
            ),
        )

    @classmethod
    async def open(
        cls,
        path: Path,
        *,
        busy_timeout_s: float = 5.0,
        self_approval: bool = True,
        principal: str | None = None,
    ) -> SqliteStore:
        """Open (creating if needed) the SQLite file with the production pragmas."""
        return cls(
            await database.Database.open(path, busy_timeout_s=busy_timeout_s),
            self_approval=self_approval,
            principal=principal,
        )

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

    async def ddl_capabilities(self) -> tuple[str, ...]:
        """None to report: on an edge device file permissions are the only authority."""
        return ()

    @property
    def commits(self) -> int:
        """Write transactions committed through the connection."""
        return self.db.commits

    async def database_now_ms(self) -> int:
        """SQLite's clock is this machine's system clock."""

        def read(conn: sqlite3.Connection) -> int:
            return int(conn.execute(Q["database_now"]).fetchone()[0])

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
        """See `ports.ExecutionStore.start`."""
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

        def read(conn: sqlite3.Connection) -> records.StatusCounts:
            counts = executions.counts(conn, now_ms=now_ms)
            return dataclasses.replace(counts, step_runs=tool_steps.count_by_status(conn))

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

        def read(conn: sqlite3.Connection) -> ports.StoredPlan | None:
            row = conn.execute(
                Q["select_plan"], {"project_id": project_id, "action_ref": action_ref}
            ).fetchone()
            if row is None:
                return None
            return ports.StoredPlan.from_row(row)

        return await self.db.read(read)

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        """See `ports.PlanStore.get_plans`."""
        params = {
            "project_ids": json.dumps([k[0] for k in keys]),
            "action_refs": json.dumps([k[1] for k in keys]),
        }

        def read(conn: sqlite3.Connection) -> list[ports.StoredPlan]:
            return [
                ports.StoredPlan.from_row(row) for row in conn.execute(Q["select_plans"], params)
            ]

        return await self.db.read(read)

    async def create_run(self, request: ports.RunCreateRequest) -> ports.RunCreateResult:
        """See `ports.RunCreateRepository.create_run`."""
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
                principal=self.approver,
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
        """See `tool_ports.ToolExecutionStartBarrierRepository.prepare`: one BEGIN IMMEDIATE."""
        try:
            return await self.db.write(functools.partial(tool_barriers.prepare, command=command))
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
