"""The page transaction of transactional actions, once for both dialects.

A transactional action's whole effect is rows in this database (`run.create`'s Run), so its
start barrier, effect, receipt and completion commit together: the strongest at-most-once
there is, one commit for a page. The effect's rows are the action's own, written by what it
supplies (`ports.PageEffects`); the start and the completion are the store's.
The page goes as a few set statements, each binding one JSON array of the items' values (a
round trip each on PostgreSQL, no per-row Python on SQLite). Items whose fence or binding no
longer holds are simply not matched by the fenced statements. If a statement fails, the store
rolls the page back and runs it again with each item alone under its own savepoint
(`commit_each`); an item that still fails is undone alone. Every item not committed takes
the per-item path (start barrier, execute, complete), which diagnoses it exactly as before.
The happy path has no savepoint: on PostgreSQL each one is two more round trips and a
subtransaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import errors, fencing, ids, records


class PartRefused(Exception):
    """Raised to undo a part of the page (all of it, or one item's savepoint): a started item
    could not be completed, and no effect may commit without its completion."""


Effects = ports.PageEffects
Items = Sequence[ports.PageItem[Any]]


async def commit_page(
    q: query.Query, effects: Effects, items: Items, *, now_ms: int, lease_ms: int
) -> list[ports.PageResult]:
    """The whole page as set statements; raises if any statement fails (nothing is kept)."""
    return await _commit_part(q, effects, items, now_ms=now_ms, lease_ms=lease_ms)


async def commit_each(
    q: query.Query, effects: Effects, items: Items, *, now_ms: int, lease_ms: int
) -> list[ports.PageResult]:
    """After `commit_page` failed: each item alone under its own savepoint; one that fails is
    undone alone and `not_taken`."""
    results: list[ports.PageResult] = []
    for item in items:
        try:
            results += await q.savepoint(
                functools.partial(
                    _commit_part, effects=effects, items=(item,), now_ms=now_ms, lease_ms=lease_ms
                )
            )
        except (errors.StoreError, PartRefused):
            results.append(_not_taken(item, "item_failed"))
    return results


def _not_taken(item: ports.PageItem[Any], reason: str) -> ports.PageResult:
    return ports.PageResult(
        dispatch_id=item.dispatch.dispatch_id, outcome=ports.PageOutcome.NOT_TAKEN, reason=reason
    )


async def _commit_part(
    q: query.Query, effects: Effects, items: Items, *, now_ms: int, lease_ms: int
) -> list[ports.PageResult]:
    """Start, effect, receipt and completion for `items` as set statements (the database
    writes the ledger from them)."""
    taken = await effects.effects_taken(q, [i.dispatch for i in items])
    fresh = [i for i in items if i.dispatch.dispatch_id not in taken]
    started = await _start(q, fresh, now_ms=now_ms, lease_ms=lease_ms) if fresh else {}
    done = [
        (i, started[i.dispatch.dispatch_id]) for i in fresh if i.dispatch.dispatch_id in started
    ]
    if done:
        await effects.create_page(q, done, now_ms=now_ms)
        await _complete(q, done, now_ms=now_ms, result_code=effects.result_code)
    results = {
        identity.dispatch_id: ports.PageResult(
            dispatch_id=identity.dispatch_id,
            outcome=ports.PageOutcome.COMMITTED,
            identity=identity,
        )
        for _, identity in done
    }
    for item in items:
        dispatch_id = item.dispatch.dispatch_id
        if dispatch_id not in results:
            reason = "effect_exists" if dispatch_id in taken else "start_refused"
            results[dispatch_id] = _not_taken(item, reason)
    return [results[i.dispatch.dispatch_id] for i in items]


async def _start(
    q: query.Query, items: Items, *, now_ms: int, lease_ms: int
) -> dict[str, records.ExecutionIdentity]:
    """The fenced start of each item; the identity of each row that started."""
    return await start_set(q, [item.request for item in items], now_ms=now_ms, lease_ms=lease_ms)


async def start_set(
    q: query.Query, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
) -> dict[str, records.ExecutionIdentity]:
    """The fenced start barriers of `requests` as one set statement (`start_page`): the
    identity of each row that started; a request whose fence or binding no longer holds is
    simply not matched."""
    page = []
    for request in requests:
        lease = request.lease
        page.append(
            {
                "dispatch_id": lease.dispatch_id,
                "approval_request_id": request.approval_request_id,
                "action_digest": request.action_digest,
                "version": lease.version,
                "owner": lease.owner,
                "token": lease.token,
                "proof": ids.lease_proof(lease.token),
                "attempt": lease.attempt,
                "expires_at_ms": fencing.start_lease_expiry(
                    lease, now_ms=now_ms, lease_ms=lease_ms
                ),
            }
        )
    rows = await q.all("start_page", {"page": json.dumps(page), "now_ms": now_ms})
    leases = {request.lease.dispatch_id: request.lease for request in requests}
    return {
        row["dispatch_id"]: fencing.started_identity(
            leases[row["dispatch_id"]],
            started_at_ms=now_ms,
            version=row["version"],
            lease_expires_at_ms=row["lease_expires_at_ms"],
        )
        for row in rows
    }


async def _complete(
    q: query.Query,
    done: Sequence[tuple[ports.PageItem[Any], records.ExecutionIdentity]],
    *,
    now_ms: int,
    result_code: str,
) -> None:
    """The fenced completion of every started item (the database writes both ledger lines)."""
    page = [
        {
            "dispatch_id": identity.dispatch_id,
            "project_id": item.dispatch.project_id,
            "owner": identity.owner,
            "token": identity.token,
            "proof": ids.lease_proof(identity.token),
            "attempt": identity.attempt,
            "version": identity.version,
            "mutation_id": _mutation_id(identity),
        }
        for item, identity in done
    ]
    completed = {
        row["dispatch_id"]: row["version"]
        for row in await q.all(
            "complete_page",
            {
                "page": json.dumps(page),
                "now_ms": now_ms,
                "result_code": result_code,
            },
        )
    }
    if len(completed) != len(done):
        # Started in this transaction and row-locked since: only a fault gets here. Undo the
        # part, so no effect ever commits without its completion.
        raise PartRefused("a started item was not completed")


def _mutation_id(identity: records.ExecutionIdentity) -> str:
    """The completion's mutation id: the one the per-item path would write (a replay matches)."""
    return fencing.mutation_id(identity.dispatch_id, identity.attempt, "complete")
