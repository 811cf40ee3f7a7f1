"""What `run.create` lends the store (`ports.action_tables.RunCreateTables`): `TABLES`.

Its repository runs the transactions of `store.py` over the store it is lent to; the page
transaction and PostgreSQL's one-statement path write its rows through the same object.
Written against the ports and the domain only, like `store.py`.
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
        """See `ports.RunCreateRepository.create_run`."""
        host = self.host
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
    """`ports.action_tables.RunCreateTables` for `run.create`."""

    statements = store.STATEMENTS

    def repository(self, host: action_tables.StoreHost) -> Repository:
        """See `ports.action_tables.RunCreateTables.repository`."""
        return Repository(host)

    def one_statement(
        self, request: ports.RunCreateRequest
    ) -> tuple[tx.Params, ports.RunCreateResult]:
        """See `store.one_statement`."""
        return store.one_statement(request)

    async def effects_taken(self, q: tx.Query, dispatches: Sequence[records.Dispatch]) -> set[str]:
        """See `store.effects_taken`."""
        return await store.effects_taken(q, dispatches)

    async def run_ids(self, q: tx.Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
        """See `store.run_ids`."""
        return await store.run_ids(q, dispatch_ids)

    async def create_page(
        self,
        q: tx.Query,
        done: Sequence[tuple[ports.PageItem, records.ExecutionIdentity]],
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
"""What the composition root hands the store for `run.create`."""
