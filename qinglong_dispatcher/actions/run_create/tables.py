"""`run.create`'s repository over the store (`Repository`), and what it lends the store
(`ports.action_tables.ActionTables`): `TABLES`.

The repository runs the transactions of `store.py` on the store the action is given
(`ports.action_tables.StoreHost`); the page transaction writes its rows through `TABLES`
(`ports.PageEffects`, supplied by the handler). Written against the ports and the domain
only, like `store.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.run_create import store
from qinglong_dispatcher.domain import records, runs
from qinglong_dispatcher.ports import action_tables
from qinglong_dispatcher.ports import transactions as tx


class Repository:
    """`ports.RunCreateRepository`, each operation one transaction of the store (`host`)."""

    def __init__(self, host: action_tables.StoreHost) -> None:
        self.host = host

    async def create_run(self, request: ports.RunCreateRequest) -> ports.RunCreateResult:
        """See `ports.RunCreateRepository.create_run`: the one-statement happy path first
        where the dialect has one (PostgreSQL's `create_run_fast`), then the transaction for
        everything else (a replay, a renewed version, a refusal)."""
        host = self.host
        params, created = store.one_statement(request)
        if await host.fast_statement("create_run_fast", params) is not None:
            return created
        try:
            return await host.runner.transaction(lambda q: store.create(q, host.shared, request))
        except store.FencedEffect as fenced:
            return ports.RunCreateResult(
                outcome=ports.RunCreateOutcome.FENCED, reason=fenced.reason
            )

    async def get_receipt(self, dispatch_id: str) -> runs.RunReceipt | None:
        """See `ports.RunCreateRepository.get_receipt`."""
        return await self.host.runner.transaction(
            lambda q: store.get_receipt(q, dispatch_id), write=False
        )

    async def get_run_by_key(self, project_id: str, idempotency_key: str) -> runs.Run | None:
        """See `ports.RunCreateRepository.get_run_by_key`."""
        return await self.host.runner.transaction(
            lambda q: store.get_run_by_key(q, project_id, idempotency_key), write=False
        )

    async def get_run(self, run_id: str) -> runs.Run | None:
        """See `ports.RunCreateRepository.get_run`."""
        return await self.host.runner.transaction(lambda q: store.get_run(q, run_id), write=False)


class Tables:
    """`ports.action_tables.ActionTables` and `ports.PageEffects` for `run.create`."""

    statements = store.STATEMENTS
    result_code = runs.RESULT_CODE_RUN_CREATED
    """What a page's committed item completes with (`ports.PageEffects.result_code`)."""

    async def effects_taken(self, q: tx.Query, dispatches: Sequence[records.Dispatch]) -> set[str]:
        """See `store.effects_taken`."""
        return await store.effects_taken(q, dispatches)

    async def run_ids(self, q: tx.Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """See `ports.action_tables.ActionTables.run_ids` (`store.run_ids`)."""
        return await store.run_ids(q, dispatch_ids)

    async def create_page(
        self,
        q: tx.Query,
        done: Sequence[tuple[ports.PageItem[runs.Run], records.ExecutionIdentity]],
        *,
        now_ms: int,
    ) -> None:
        """See `store.create_page`."""
        await store.create_page(q, done, now_ms=now_ms)

    async def settle(
        self,
        q: tx.Query,
        dispatch: records.Dispatch,
        *,
        resolution: str,
        reason_code: str,
        now_ms: int,
    ) -> None:
        """Nothing: a Run commits only with its completion, so a settled dispatch has no Run
        of its own to move."""

    async def detail(
        self, q: tx.Query, dispatch: records.Dispatch, part: action_tables.DetailPart
    ) -> action_tables.DetailPart:
        """The receipt, and the Run it names (else the Run holding the dispatch id as its
        idempotency key)."""
        receipt = await store.get_receipt(q, dispatch.dispatch_id)
        run_id = receipt.resource_id if receipt is not None else None
        if run_id is None:
            run = await store.get_run_by_key(q, dispatch.project_id, dispatch.dispatch_id)
            run_id = run.run_id if run is not None else None
        return dataclasses.replace(part, receipt=receipt, run_id=run_id)

    async def count(self, q: tx.Query, counts: records.StatusCounts) -> records.StatusCounts:
        """With the Runs counted (`status`, the metrics)."""
        return dataclasses.replace(counts, runs=await store.count_runs(q))


TABLES = Tables()
"""What the composition root hands the store for `run.create`, and the handler the page
transaction."""
