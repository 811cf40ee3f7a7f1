"""The `ExecutionStore` port operations of `SqlStore`, each one shared transaction of `executions`.

A part of `SqlStore` (which inherits it) kept apart so that the store stays one screenful per
port; a dialect overrides a method only for a measured fast path (PostgreSQL's `start`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import executions, query, rows, tool_steps
from qinglong_dispatcher.domain import records


class ExecutionOperations:
    """Claim, renew, start and the execution reads, run by the dialect's `runner`."""

    runner: query.Runner

    async def claim_due(
        self, *, now_ms: int, owner: str, limit: int, lease_ms: int
    ) -> records.ClaimBatch:
        """See `ports.ExecutionStore.claim_due`."""
        return await self.runner.transaction(
            functools.partial(
                executions.claim_due, now_ms=now_ms, owner=owner, limit=limit, lease_ms=lease_ms
            )
        )

    async def claim(
        self, dispatch_id: str, *, now_ms: int, owner: str, token: str, lease_ms: int
    ) -> records.Claim:
        """See `ports.ExecutionStore.claim`."""
        return await self.runner.transaction(
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
        return await self.runner.transaction(
            functools.partial(executions.renew, lease=lease, now_ms=now_ms, lease_ms=lease_ms)
        )

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        """See `ports.ExecutionStore.start`."""
        return await self.runner.transaction(
            functools.partial(
                executions.start, requests=tuple(requests), now_ms=now_ms, lease_ms=lease_ms
            )
        )

    async def list_due(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[records.Execution]:
        """See `ports.ExecutionStore.list_due`."""
        return await self.runner.transaction(
            functools.partial(executions.list_due, now_ms=now_ms, limit=limit, after=after),
            write=False,
        )

    async def counts(self, *, now_ms: int) -> records.StatusCounts:
        """See `ports.ExecutionStore.counts` (with StepRuns per status, from one snapshot)."""

        async def read(q: query.Query) -> records.StatusCounts:
            counts = await executions.counts(q, now_ms=now_ms)
            return dataclasses.replace(counts, step_runs=await tool_steps.count_by_status(q))

        return await self.runner.transaction(read, write=False)

    async def backlog(self, *, now_ms: int, cap: int = ports.BACKLOG_CAP) -> records.Backlog:
        """See `ports.ExecutionStore.backlog`."""
        return await self.runner.transaction(
            functools.partial(executions.backlog, now_ms=now_ms, cap=cap), write=False
        )

    async def get_execution(self, dispatch_id: str) -> records.Execution | None:
        """See `ports.ExecutionStore.get_execution`."""
        found = await self.runner.transaction(
            functools.partial(rows.read_row, dispatch_id=dispatch_id), write=False
        )
        return None if found is None else found[0]

    async def get_dispatch(self, dispatch_id: str) -> records.Dispatch | None:
        """See `ports.ExecutionStore.get_dispatch`."""
        found = await self.runner.transaction(
            functools.partial(rows.read_row, dispatch_id=dispatch_id), write=False
        )
        return None if found is None else found[1]

    async def execution_events(self, dispatch_id: str) -> list[records.ExecutionEvent]:
        """See `ports.ExecutionStore.execution_events`."""
        return await self.runner.transaction(
            functools.partial(executions.events, dispatch_id=dispatch_id), write=False
        )
