"""Ending a claim: the pre-barrier release and the fenced completion (docs/state-machine.md).

Both replay by mutation id (the same content is `existing`, other content a conflict) and both
read the execution row locked first, so a concurrent replay of the same mutation waits for the
first and then finds its event. The fencing decisions come from `domain.fencing`, and every
UPDATE repeats their conditions in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import query, rows
from qinglong_dispatcher.domain import fencing, ids, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus


async def _replayed_mutation(
    q: query.Query,
    dispatch_id: str,
    mutation_id: str,
    *,
    to_status: ExecutionStatus,
    result_code: str,
    owner: str,
    token: str,
) -> records.Transition | None:
    row = await q.one(
        "select_event_by_mutation", {"dispatch_id": dispatch_id, "mutation_id": mutation_id}
    )
    if row is None:
        return None
    event = records.ExecutionEvent.from_row(row)
    outcome, reason = fencing.mutation_replay(
        event, to_status=to_status, result_code=result_code, owner=owner, token=token
    )
    return records.Transition(
        outcome=outcome,
        dispatch_id=dispatch_id,
        status=event.to_status,
        version=event.version,
        reason=reason,
    )


async def release_preflight(
    q: query.Query,
    lease: records.Lease,
    *,
    mutation_id: str,
    kind: states.ReleaseKind,
    result_code: str,
    retry_at_ms: int | None,
    now_ms: int,
) -> records.Transition:
    """Give a claim back before the barrier; replays by mutation id."""
    found = await rows.read_row(q, lease.dispatch_id, lock=True)
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=lease.dispatch_id, reason="not_found"
        )
    execution, _ = found
    target = states.release_target(kind, lease.attempt, execution.max_attempts)
    replay = await _replayed_mutation(
        q,
        lease.dispatch_id,
        mutation_id,
        to_status=target,
        result_code=result_code,
        owner=lease.owner,
        token=lease.token,
    )
    if replay is not None:
        return replay
    refusal = fencing.release_refusal(execution, lease)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=lease.dispatch_id, reason=refusal
        )
    later = retry_at_ms if retry_at_ms is not None else now_ms
    eligible = {
        ExecutionStatus.PENDING: later if kind is states.ReleaseKind.WAIT else now_ms,
        ExecutionStatus.RETRY_WAIT: later,
    }.get(target)
    return await rows.fenced_update(
        q,
        "release_row",
        {
            "dispatch_id": lease.dispatch_id,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "proof": ids.lease_proof(lease.token),
            "attempt": lease.attempt,
            "to_status": target.value,
            "eligible_at_ms": eligible,
            "retry_at_ms": eligible if target is ExecutionStatus.RETRY_WAIT else None,
            "refund": 1 if target is ExecutionStatus.PENDING else 0,  # a yield or a wait
            "mutation_id": mutation_id,
            "result_code": result_code,
            "completed_at_ms": now_ms if target is ExecutionStatus.BLOCKED else None,
            "now_ms": now_ms,
        },
        dispatch_id=lease.dispatch_id,
        outcome=Outcome.RELEASED,
        status=target,
    )


async def complete(
    q: query.Query,
    identity: records.ExecutionIdentity,
    *,
    mutation_id: str,
    completion: states.Completion,
    result_code: str,
    now_ms: int,
    receipt: records.ActionReceipt | None = None,
) -> records.Transition:
    """Record the terminal result under the execution identity; a renewed version is fine.

    A receipt commits with the completion, in the row (a replay of the same mutation returns
    `existing` and writes nothing: the first completion's receipt stands)."""
    target = ExecutionStatus(completion.value)
    # Locked first: a concurrent complete of the same mutation then finds its event committed.
    found = await rows.read_row(q, identity.dispatch_id, lock=True)
    replay = await _replayed_mutation(
        q,
        identity.dispatch_id,
        mutation_id,
        to_status=target,
        result_code=result_code,
        owner=identity.owner,
        token=identity.token,
    )
    if replay is not None:
        return replay
    if found is None:
        return records.Transition(
            outcome=Outcome.NOT_FOUND, dispatch_id=identity.dispatch_id, reason="not_found"
        )
    execution, _ = found
    refusal = fencing.complete_refusal(execution, identity)
    if refusal is not None:
        return records.Transition(
            outcome=Outcome.CONFLICT, dispatch_id=identity.dispatch_id, reason=refusal
        )
    return await complete_checked(
        q,
        identity,
        mutation_id=mutation_id,
        completion=completion,
        result_code=result_code,
        now_ms=now_ms,
        receipt=receipt,
    )


async def complete_many(
    q: query.Query, requests: Sequence[ports.CompletionRequest], *, now_ms: int
) -> list[records.Transition]:
    """`complete` of each request in this one transaction (each row locked and fenced alone)."""
    return [
        await complete(
            q,
            r.identity,
            mutation_id=r.mutation_id,
            completion=r.completion,
            result_code=r.result_code,
            now_ms=now_ms,
            receipt=r.receipt,
        )
        for r in requests
    ]


async def complete_checked(
    q: query.Query,
    identity: records.ExecutionIdentity,
    *,
    mutation_id: str,
    completion: states.Completion,
    result_code: str,
    now_ms: int,
    receipt: records.ActionReceipt | None = None,
) -> records.Transition:
    """The completion write itself, for a caller that already read and fenced the row in this
    transaction (the update still repeats every condition)."""
    target = ExecutionStatus(completion.value)
    return await rows.fenced_update(
        q,
        "complete_row",
        {
            "dispatch_id": identity.dispatch_id,
            "version": identity.version,
            "owner": identity.owner,
            "token": identity.token,
            "proof": ids.lease_proof(identity.token),
            "attempt": identity.attempt,
            "started_at_ms": identity.started_at_ms,
            "to_status": target.value,
            "mutation_id": mutation_id,
            "result_code": result_code,
            "now_ms": now_ms,
            "receipt_json": None if receipt is None else receipt.receipt_json,
            "receipt_digest": None if receipt is None else receipt.receipt_digest,
        },
        dispatch_id=identity.dispatch_id,
        outcome=Outcome.COMPLETED,
        status=target,
    )
