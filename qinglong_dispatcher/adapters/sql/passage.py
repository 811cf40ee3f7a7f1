"""The passage of a transactional action, once for both dialects (docs/decisions/0055).

A transactional action's whole effect is rows in this database (`run.create`'s Run), so a
due row of one needs no claim committed before its start: its claim, start barrier, effect,
receipt and completion are one transaction, and the row is written once, from `pending`
straight to `succeeded` (migration 0043 admits that edge only for a type marked
transactional, only with the dispatch's receipt, only inside its window and under no
freeze). The page is read inside the transaction (on PostgreSQL locked, skipping the rows
another replica holds), the plans with it; each row's fence is drawn here as a claim would
draw it. Each row is written before its effects, on both dialects: the Run's and the
receipt's guards then admit them as they admit a started row's, and the receipt is checked
at commit (PostgreSQL: a deferred constraint trigger; SQLite: a deferred foreign key). A row
whose plan does not resolve, or whose effect exists already, is left waiting: the claim
takes it and the per-item path says why. A statement that fails undoes the whole passage;
the claim then takes every row of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import plan_reads, query
from qinglong_dispatcher.domain import errors, fencing, ids, records
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes


class PassageRefused(errors.StoreError):
    """A row of the passage was not written although its page was locked: only a fault gets
    here. Raised to undo the whole passage, so no effect ever commits without its row."""


async def pass_due(
    q: query.Query,
    action_type: str,
    effects: ports.PageEffects,
    effect_of: ports.EffectOf,
    *,
    envelopes: plan_envelopes.Envelopes,
    now_ms: int,
    owner: str,
    limit: int,
) -> ports.PassageBatch:
    """Read a page of due waiting rows of `action_type` and pass each that may pass."""
    await q.run("page_plans")  # read in the due index's order, written by key
    found = await q.all(
        "passage_rows", {"action_type": action_type, "now_ms": now_ms, "limit": limit}
    )
    observed = [(records.Execution.from_row(r), records.Dispatch.from_joined_row(r)) for r in found]
    if not observed:
        return ports.PassageBatch(passed=(), observed=0)
    keys = [(d.project_id, d.action_ref) for _, d in observed]
    plans = {
        (p.project_id, p.action_ref): envelopes.open(p) for p in await plan_reads.get_plans(q, keys)
    }
    taken = await effects.effects_taken(q, [d for _, d in observed])
    done: list[tuple[ports.PageItem[Any], records.ExecutionIdentity]] = []
    for execution, dispatch in observed:
        stored = plans.get((dispatch.project_id, dispatch.action_ref))
        if stored is None or dispatch.dispatch_id in taken:
            continue
        try:
            effect = effect_of(dispatch, stored, now_ms)
        except errors.QinglongError:
            continue  # the claim takes it; the per-item path inspects and says why
        done.append(_fenced(execution, dispatch, effect, owner=owner, now_ms=now_ms))
    if done:
        await _write(q, effects, done, now_ms=now_ms, owner=owner)
    passed = tuple(ports.Passed(dispatch=item.dispatch, identity=i) for item, i in done)
    return ports.PassageBatch(passed=passed, observed=len(found))


def _fenced(
    execution: records.Execution,
    dispatch: records.Dispatch,
    effect: object,
    *,
    owner: str,
    now_ms: int,
) -> tuple[ports.PageItem[Any], records.ExecutionIdentity]:
    """The item and the fence its row takes: the next attempt, a fresh token, one version on."""
    lease = records.Lease(
        dispatch_id=execution.dispatch_id,
        attempt=execution.attempt + 1,
        owner=owner,
        token=ids.new_lease_token(),
        version=execution.version,
        expires_at_ms=now_ms,
    )
    request = records.StartRequest(
        lease=lease,
        approval_request_id=dispatch.approval_request_id,
        action_digest=dispatch.action_digest,
    )
    identity = fencing.started_identity(
        lease, started_at_ms=now_ms, version=execution.version + 1, lease_expires_at_ms=now_ms
    )
    return ports.PageItem(request=request, dispatch=dispatch, effect=effect), identity


async def _write(
    q: query.Query,
    effects: ports.PageEffects,
    done: Sequence[tuple[ports.PageItem[Any], records.ExecutionIdentity]],
    *,
    now_ms: int,
    owner: str,
) -> None:
    """Each row once, then its effect."""
    page = json.dumps(
        [
            {
                "dispatch_id": identity.dispatch_id,
                "version": item.request.lease.version,
                "token": identity.token,
                "proof": ids.lease_proof(identity.token),
                "mutation_id": fencing.mutation_id(
                    identity.dispatch_id, identity.attempt, "complete"
                ),
            }
            for item, identity in done
        ]
    )
    params = {"page": page, "now_ms": now_ms, "owner": owner, "result_code": effects.result_code}
    written = await q.all("pass_rows", params)
    if len(written) != len(done):
        raise PassageRefused("a passage's row was not written", code="passage_refused")
    await effects.create_page(q, done, now_ms=now_ms)
