"""The `run.create` effect transaction and its replay from the receipt, once for both dialects.

One transaction (docs/actions.md): the execution row is read locked, a receipt means a
replay, otherwise the fence is re-verified and Run, attempt, RunEvent, receipt and the fenced
completion are written together. PostgreSQL first tries its one-statement happy path
(`create_run_fast`, with the parameters of `one_statement`, run by the store's
`fast_statement`) and falls back to this transaction. A page of them, in the dispatcher's
page transaction (`adapters/sql/page.py`), writes the same rows a page at a time
(`effects_taken`, `create_page`).

Its named statements are `queries/sqlite.sql` and `queries/postgres.sql` beside this module
(`STATEMENTS`); the store loads them with its own. Written against `ports.transactions`
only: the execution row and the fenced completion come from the store (`shared`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import fencing, ids, records, runs, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.ports import transactions as tx

STATEMENTS = Path(__file__).parent / "queries"
"""This action's named statements, one file per dialect (`<dialect>.sql`)."""


class FencedEffect(Exception):
    """Raised inside the transaction to roll it back when the completion is refused."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def get_receipt(q: tx.Query, dispatch_id: str) -> runs.RunReceipt | None:
    """The receipt of a dispatch."""
    row = await q.one("select_receipt", {"dispatch_id": dispatch_id})
    return None if row is None else runs.RunReceipt.from_row(row)


async def run_ids(q: tx.Query, dispatch_ids: Sequence[str]) -> dict[str, str]:
    """The Run holding each dispatch id as its idempotency key, for those that have one."""
    found = await q.all(
        "select_run_ids_by_dispatch", {"dispatch_ids": json.dumps(list(dispatch_ids))}
    )
    return {row["dispatch_id"]: row["run_id"] for row in found}


async def count_runs(q: tx.Query) -> int:
    """How many Runs exist (the `runs` figure of `status`)."""
    return int((await q.one("count_runs"))["n"])


async def get_run(q: tx.Query, run_id: str) -> runs.Run | None:
    """One Run by id."""
    row = await q.one("select_run", {"run_id": run_id})
    return None if row is None else runs.Run.from_row(row)


async def get_run_by_key(q: tx.Query, project_id: str, idempotency_key: str) -> runs.Run | None:
    """The Run holding an idempotency key."""
    row = await q.one(
        "select_run_by_key", {"project_id": project_id, "idempotency_key": idempotency_key}
    )
    return None if row is None else runs.Run.from_row(row)


async def _replay(
    q: tx.Query, request: ports.RunCreateRequest, receipt: runs.RunReceipt
) -> ports.RunCreateResult:
    dispatch = request.dispatch
    run = await get_run(q, receipt.resource_id)
    mismatch = runs.receipt_mismatch(
        receipt,
        run,
        approval_request_id=dispatch.approval_request_id,
        project_id=dispatch.project_id,
        action_digest=dispatch.action_digest,
        attempt=receipt.execution_attempt,
        started_at_ms=receipt.started_at_ms,
    )
    if mismatch is not None:
        return ports.RunCreateResult(outcome=ports.RunCreateOutcome.CONFLICT, reason=mismatch)
    return ports.RunCreateResult(outcome=ports.RunCreateOutcome.EXISTING, run=run, receipt=receipt)


async def create(
    q: tx.Query, shared: tx.Shared, request: ports.RunCreateRequest
) -> ports.RunCreateResult:
    """Replay from the receipt, or re-verify the fence and write everything in this transaction.

    The execution row is locked before anything is read: a second effect transaction of the
    same dispatch (a retry after a lost acknowledgement) then waits for the first and finds
    its receipt, instead of racing it into the unique idempotency key. A renewed version is
    accepted; the receipt binds the version the effect saw.
    """
    dispatch, identity, run = request.dispatch, request.identity, request.run
    found = await shared.read_row(q, dispatch.dispatch_id, lock=True)
    receipt = await get_receipt(q, dispatch.dispatch_id)
    if receipt is not None:
        return await _replay(q, request, receipt)
    if found is None:
        return ports.RunCreateResult(outcome=ports.RunCreateOutcome.FENCED, reason="not_found")
    execution, _ = found
    refusal = fencing.complete_refusal(execution, identity)
    if refusal is not None or execution.project_id != dispatch.project_id:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.FENCED, reason=refusal or "project_mismatch"
        )
    if await get_run_by_key(q, dispatch.project_id, dispatch.dispatch_id) is not None:
        return ports.RunCreateResult(
            outcome=ports.RunCreateOutcome.CONFLICT, reason="idempotency_key_collision"
        )
    # The holder's proof goes with the Run and the receipt: PostgreSQL writes neither for a
    # dispatch started under another lease (migration accountable_changes; SQLite ignores it).
    proof = ids.lease_proof(identity.token)
    await q.run("insert_run", {**runs.run_row(run), "proof": proof})
    await q.run(
        "insert_run_attempt",
        {"run_id": run.run_id, "status": run.status.value, "created_at_ms": run.created_at_ms},
    )
    await q.run(
        "insert_run_event",
        {
            "run_id": run.run_id,
            "seq": run.event_seq,
            "event_type": runs.RUN_CREATED_EVENT,
            "run_version": run.version,
        },
    )
    receipt = runs.receipt_for(
        dispatch=dispatch,
        attempt=identity.attempt,
        execution_version=execution.version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=request.now_ms,
    )
    await q.run("insert_receipt", {**runs.receipt_row(receipt), "proof": proof})
    # The row was read locked and fenced above; the completing UPDATE repeats every condition.
    done = await shared.complete_checked(
        q,
        identity,
        mutation_id=request.mutation_id,
        completion=states.Completion.SUCCEEDED,
        result_code=runs.RESULT_CODE_RUN_CREATED,
        now_ms=request.now_ms,
    )
    if done.outcome is not Outcome.COMPLETED:
        # Roll the whole effect back: a Run must never commit without its completion fence.
        raise FencedEffect(done.reason or "complete_refused")
    return ports.RunCreateResult(outcome=ports.RunCreateOutcome.CREATED, run=run, receipt=receipt)


def one_statement(request: ports.RunCreateRequest) -> tuple[tx.Params, ports.RunCreateResult]:
    """The parameters of PostgreSQL's `create_run_fast` and its result when it wrote a row.

    That statement writes everything `create` writes, in one data-modifying CTE, when the fence
    holds at exactly the started version (no renew), no receipt and no Run holds the key; when
    it writes nothing the caller runs `create`, which decides.
    """
    dispatch, identity, run = request.dispatch, request.identity, request.run
    receipt = runs.receipt_for(
        dispatch=dispatch,
        attempt=identity.attempt,
        execution_version=identity.version,
        started_at_ms=identity.started_at_ms,
        run_id=run.run_id,
        created_at_ms=request.now_ms,
    )
    params = {
        **runs.run_row(run),
        "run_status": run.status.value,
        "run_version": run.version,
        "event_type": runs.RUN_CREATED_EVENT,
        **runs.receipt_row(receipt),
        "dispatch_id": dispatch.dispatch_id,
        "attempt": identity.attempt,
        "version": identity.version,
        "owner": identity.owner,
        "token": identity.token,
        "proof": ids.lease_proof(identity.token),
        "mutation_id": request.mutation_id,
        "now_ms": request.now_ms,
    }
    created = ports.RunCreateResult(
        outcome=ports.RunCreateOutcome.CREATED, run=run, receipt=receipt
    )
    return params, created


async def effects_taken(q: tx.Query, dispatches: Sequence[records.Dispatch]) -> set[str]:
    """The dispatches of a page whose effect already exists (a receipt, or a Run holding the
    dispatch id as its idempotency key): the per-item path replays or refuses those."""
    page = [{"dispatch_id": d.dispatch_id, "project_id": d.project_id} for d in dispatches]
    found = await q.all("page_effects_taken", {"page": json.dumps(page)})
    return {row["dispatch_id"] for row in found}


async def create_page(
    q: tx.Query,
    done: Sequence[tuple[ports.PageItem[runs.Run], records.ExecutionIdentity]],
    *,
    now_ms: int,
) -> None:
    """Run, attempt, RunEvent and receipt of each item a page transaction started (what
    `create` writes for one), a page of rows per statement (`Query.run_rows`); the page
    transaction completes them."""
    run_rows = tx.Rows(
        [
            {**runs.run_row(item.effect), "lease_proof": ids.lease_proof(identity.token)}
            for item, identity in done
        ]
    )
    await q.run_rows("insert_page_runs", run_rows, {"event_type": runs.RUN_CREATED_EVENT})
    receipts = tx.Rows(
        [
            {
                **runs.receipt_row(
                    runs.receipt_for(
                        dispatch=item.dispatch,
                        attempt=identity.attempt,
                        execution_version=identity.version,
                        started_at_ms=identity.started_at_ms,
                        run_id=item.effect.run_id,
                        created_at_ms=now_ms,
                    )
                ),
                "lease_proof": ids.lease_proof(identity.token),
            }
            for item, identity in done
        ]
    )
    await q.run_rows("insert_page_receipts", receipts)
