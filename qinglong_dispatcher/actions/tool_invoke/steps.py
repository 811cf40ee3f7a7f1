"""Tool StepRuns: creation, reads, the shared advance, and the settling transactions.

`advance` is the one place a StepRun moves: compare-and-set the StepRun, compare-and-set the
Run's version and event sequence, then append the RunEvent and the ledger line, in the
caller's transaction (steps 5–7 of the start barrier; also the settle after the adapter and
in a recovery resolution). Rows are locked in one order everywhere — execution, then Run,
then StepRun — so two PostgreSQL transactions never wait on each other in a cycle (on SQLite
the `lock_*` statements are the plain reads: the write lock is already the transaction's).

Its named statements and the barrier's are `queries/sqlite.sql` and `queries/postgres.sql`
(`STATEMENTS`); the store loads them with its own. Written against `ports.transactions` only:
the execution row, the completion and the approval's life come from the store (`shared`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.domain import approvals as approval_records
from qinglong_dispatcher.domain import errors, fencing, records, runs
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.tools import barrier_checks as tool_barrier_checks
from qinglong_dispatcher.domain.tools import steps
from qinglong_dispatcher.ports import transactions as tx

STATEMENTS = Path(__file__).parent / "queries"
"""tool.invoke's named statements (StepRuns, their ledger, the barrier), one file per dialect."""


class Refused(errors.StoreError):
    """Raised inside a transaction to roll it back whole; `reason` is a low-sensitivity code.

    The store turns it into a typed result; should it escape (a resolution racing a StepRun
    that moved), it is a non-retryable store error and nothing was written.
    """

    code = "step_run_refused"

    def __init__(self, reason: str) -> None:
        super().__init__(f"tool step refused: {reason}")
        self.reason = reason


async def get(q: tx.Query, step_run_id: str, *, lock: bool = False) -> steps.StepRun | None:
    """One StepRun, its binding re-checked; `lock` holds the row until commit."""
    row = await q.one("lock_step_run" if lock else "select_step_run", {"step_run_id": step_run_id})
    return None if row is None else steps.StepRun.from_row(row)


async def lock_run(q: tx.Query, run_id: str) -> runs.Run | None:
    """The Run a step moves, held until commit (plain reads: `run_create/store.get_run`)."""
    row = await q.one("lock_run", {"run_id": run_id})
    return None if row is None else runs.Run.from_row(row)


async def get_by_approval(q: tx.Query, approval_request_id: str) -> steps.StepRun | None:
    """The StepRun bound to an approval request (at most one: a unique key)."""
    row = await q.one("select_step_run_by_approval", {"approval_request_id": approval_request_id})
    return None if row is None else steps.StepRun.from_row(row)


async def get_mutation(q: tx.Query, mutation_id: str) -> steps.Mutation | None:
    """One ledger line, its digest re-checked."""
    row = await q.one("select_step_run_mutation", {"mutation_id": mutation_id})
    return None if row is None else steps.Mutation.from_row(row)


async def mutations(q: tx.Query, step_run_id: str) -> list[steps.Mutation]:
    """The ledger of one StepRun, oldest first."""
    found = await q.all("select_step_run_mutations", {"step_run_id": step_run_id})
    return [steps.Mutation.from_row(row) for row in found]


async def count_by_status(q: tx.Query) -> dict[str, int]:
    """StepRuns per status, every status present."""
    counts = {status.value: 0 for status in steps.StepRunStatus}
    for row in await q.all("count_step_runs_by_status"):
        counts[row["status"]] = row["n"]
    return counts


async def create(q: tx.Query, new: steps.NewStepRun, *, now_ms: int) -> steps.StepRun:
    """Insert a `ready`/`waiting_approval` StepRun under a queued or running Run of its project."""
    binding = new.binding
    run = await lock_run(q, binding.run_id)
    if run is None or run.project_id != binding.project_id:
        raise errors.StepRunRefused(
            f"run {binding.run_id} not found in project {binding.project_id}"
        )
    if run.status not in tool_barrier_checks.ACTIVE_RUN:
        raise errors.StepRunRefused(
            f"run {binding.run_id} is {run.status.value}: a step needs a queued or running run"
        )
    await q.run(
        "insert_step_run",
        {
            "step_run_id": binding.step_run_id,
            "run_id": binding.run_id,
            "project_id": binding.project_id,
            "tool_id": binding.tool_id,
            "tool_version": binding.tool_version,
            "definition_digest": binding.definition_digest,
            "action_type": binding.action_type,
            "action_ref": binding.action_ref,
            "action_digest": binding.action_digest,
            "approval_request_id": binding.approval_request_id,
            "binding_digest": binding.digest,
            "status": new.status.value,
            "now_ms": now_ms,
        },
    )
    created = await get(q, binding.step_run_id)
    assert created is not None
    return created


async def submit(
    q: tx.Query,
    shared: tx.Shared,
    principal: approval_records.Principal,
    new: approval_records.NewApproval,
    step: steps.NewStepRun,
    *,
    approved_by: str,
    now_ms: int,
    max_attempts: int,
) -> approval_records.Consumed:
    """Plan + pending approval, the StepRun waiting for it, approve and consume: one transaction.

    A self-approval: refused whole when the principal may not self-approve.
    """
    await shared.create_approval(q, principal, new, now_ms=now_ms)
    await create(q, step, now_ms=now_ms)
    await shared.approve(
        q, principal, new.approval_request_id, decided_by=approved_by, now_ms=now_ms
    )
    return await shared.consume(
        q, principal, new.approval_request_id, now_ms=now_ms, max_attempts=max_attempts
    )


async def advance(
    q: tx.Query,
    step: steps.StepRun,
    run: runs.Run,
    *,
    to_status: steps.StepRunStatus,
    mutation_id: str,
    reason_code: str,
    result_code: str | None,
    event_type: str,
    now_ms: int,
) -> steps.Mutation:
    """CAS the StepRun, CAS the Run, append RunEvent and ledger line; `Refused` if either moved."""
    draft = steps.Mutation(
        mutation_id=mutation_id,
        step_run_id=step.step_run_id,
        run_id=run.run_id,
        project_id=step.binding.project_id,
        from_status=step.status,
        to_status=to_status,
        from_version=step.version,
        to_version=step.version + 1,
        run_event_seq=run.event_seq + 1,
        run_version=run.version + 1,
        reason_code=reason_code,
    ).signed()
    moved = await q.one(
        "advance_step_run",
        {
            "step_run_id": step.step_run_id,
            "from_status": step.status.value,
            "from_version": step.version,
            "to_status": to_status.value,
            "to_version": draft.to_version,
            "result_code": result_code,
            "now_ms": now_ms,
        },
    )
    if moved is None:
        raise Refused("step_run_moved")
    sequenced = await q.one(
        "advance_run_sequence",
        {
            "run_id": run.run_id,
            "version": run.version,
            "event_seq": run.event_seq,
            "now_ms": now_ms,
        },
    )
    if sequenced is None or (sequenced["version"], sequenced["event_seq"]) != (
        draft.run_version,
        draft.run_event_seq,
    ):
        raise Refused("run_moved")
    await q.run(
        "insert_run_event",
        {
            "run_id": run.run_id,
            "seq": draft.run_event_seq,
            "event_type": event_type,
            "run_version": draft.run_version,
        },
    )
    committed = await q.one("insert_step_run_mutation", draft.row())
    return dataclasses.replace(draft, committed_at_ms=committed["committed_at_ms"])


async def settle(
    q: tx.Query,
    dispatch: records.Dispatch,
    *,
    resolution: str,
    reason_code: str,
    now_ms: int,
) -> steps.StepRunStatus | None:
    """Move the dispatch's StepRun as its dispatch settles (see `steps.settle_target`).

    Reads only StepRuns, the ledger and Runs, so a PostgreSQL operator login (which may not
    read the barriers) can run it inside a manual resolution. None when the dispatch has no
    StepRun.
    """
    seen = await get_by_approval(q, dispatch.approval_request_id)
    if seen is None:
        return None
    run, step = await _locked(q, seen)
    started = await get_mutation(q, tool_invocations.ids_for(dispatch.dispatch_id).mutation_id)
    return await _settle_locked(
        q,
        dispatch,
        run,
        step,
        started,
        resolution=resolution,
        reason_code=reason_code,
        now_ms=now_ms,
    )


async def _locked(q: tx.Query, seen: steps.StepRun) -> tuple[runs.Run, steps.StepRun]:
    """The Run, then the StepRun `seen` names, locked (the one order); `Refused` if gone."""
    run = await lock_run(q, seen.binding.run_id)
    step = await get(q, seen.step_run_id, lock=True)
    if run is None or step is None:
        raise Refused("run_missing")
    return run, step


async def _settle_locked(
    q: tx.Query,
    dispatch: records.Dispatch,
    run: runs.Run,
    step: steps.StepRun,
    started: steps.Mutation | None,
    *,
    resolution: str,
    reason_code: str,
    now_ms: int,
) -> steps.StepRunStatus:
    """`settle` on the rows already locked, `started` being the dispatch's start line."""
    started_here = started is not None and started.to_version == step.version
    target = steps.settle_target(step.status, resolution, started_here=started_here)
    if target is None:
        return step.status
    await advance(
        q,
        step,
        run,
        to_status=target,
        mutation_id=tool_invocations.finish_mutation_id(dispatch.dispatch_id),
        reason_code=reason_code,
        result_code=reason_code,
        event_type=steps.RESULT_EVENT[target],
        now_ms=now_ms,
    )
    return target


async def complete(
    q: tx.Query, shared: tx.Shared, request: ports.ToolStepCompletion
) -> ports.ToolStepCompletionResult:
    """The StepRun's result and the execution's completion in this one transaction.

    Execution, Run, StepRun locked in that order; the StepRun's ledger is read once, for both
    this dispatch's start line and its finish line (present: a replay, which writes nothing
    and lets the store's `complete` answer by its mutation id).
    """
    dispatch, identity = request.dispatch, request.identity
    found = await shared.read_row(q, dispatch.dispatch_id, lock=True)
    seen = await get_by_approval(q, dispatch.approval_request_id)
    locked: tuple[runs.Run, steps.StepRun] | None = None
    ledger: dict[str, steps.Mutation] = {}
    if seen is not None:
        locked = await _locked(q, seen)
        ledger = {m.mutation_id: m for m in await mutations(q, seen.step_run_id)}
    status = None if locked is None else locked[1].status
    mutation_id = fencing.mutation_id(dispatch.dispatch_id, identity.attempt, "complete")
    settle_now = tool_invocations.finish_mutation_id(dispatch.dispatch_id) not in ledger
    if settle_now:
        if seen is not None and request.step_run_id not in (None, seen.step_run_id):
            raise Refused("step_run_mismatch")
        refusal = None if found is None else fencing.complete_refusal(found[0], identity)
        if found is None or refusal is not None:
            raise Refused(refusal or "not_found")
        if locked is not None:
            status = await _settle_locked(
                q,
                dispatch,
                *locked,
                ledger.get(tool_invocations.ids_for(dispatch.dispatch_id).mutation_id),
                resolution=request.completion.value,
                reason_code=request.result_code,
                now_ms=request.now_ms,
            )
    # Settled here: the row was read locked and fenced above, so only the write is left; a
    # replay asks the store's `complete`, which answers by the mutation id.
    completing = shared.complete_checked if settle_now else shared.complete
    done = await completing(
        q,
        identity,
        mutation_id=mutation_id,
        completion=request.completion,
        result_code=request.result_code,
        now_ms=request.now_ms,
    )
    if done.outcome not in (Outcome.COMPLETED, Outcome.EXISTING):
        raise Refused(done.reason or "complete_refused")
    return ports.ToolStepCompletionResult(
        outcome=ports.ToolStepOutcome.COMPLETED
        if done.outcome is Outcome.COMPLETED
        else ports.ToolStepOutcome.EXISTING,
        step_status=status,
    )
