"""Execution transactions for both dialects: claim a due page or one row, renew, start, reads.

Writers read the row they decide about (locked: `claim_due_rows`, `lock_execution`), ask
`domain.fencing`, and write with an update that repeats the same conditions in SQL, so a row
that changed in between is never overwritten; the start barrier writes first and asks the
domain only why a write matched nothing. Releases and completions live in `completions`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import page as pages
from qinglong_dispatcher.adapters.sql import query, rows
from qinglong_dispatcher.domain import fencing, ids, records, states, targets
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus

_BEFORE_ALL = (-(2**63), "")
"""A keyset position before every row of the due index."""

SKIPPING_WINDOW = 1024
"""Due rows a claim that skips the actions of full passages looks among at most (decision
0060): behind a backlog of those actions it costs this window, not the backlog."""

Observed = tuple[records.Execution, records.Dispatch]

EXPIRED_OWNERS = 5
"""How many owners `status` names for the expired leases (the most affected first)."""


# -- claims ------------------------------------------------------------------------------


async def claim_due(
    q: query.Query,
    *,
    now_ms: int,
    owner: str,
    limit: int,
    lease_ms: int,
    skip_action_types: Collection[str] = (),
) -> records.ClaimBatch:
    """One due observation and a fenced claim of each observed row, in this transaction (on
    PostgreSQL the observation locks what it sees and skips what other replicas hold)."""
    skip = json.dumps(sorted(skip_action_types))
    ahead = SKIPPING_WINDOW if skip_action_types else 0  # 0: no window
    params = {"now_ms": now_ms, "limit": limit, "skip_action_types": skip, "ahead": ahead}
    await q.run("page_plans")  # read in the due index's order, written by key
    found = await q.all("claim_due_rows", params)
    page = [(records.Execution.from_row(r), records.Dispatch.from_joined_row(r)) for r in found]
    # A lease taken over before goes in a page of its own; `observed` still counts the whole
    # observation, so a full one sends the dispatcher on to the next page.
    page = page[: fencing.isolated_prefix([execution for execution, _ in page])]
    page = targets.first_per_target(page, lambda observed: observed[1].target)
    claims = await _claim_page(q, page, now_ms=now_ms, owner=owner, lease_ms=lease_ms, token=None)
    return records.ClaimBatch(claims=claims, observed=len(found))


async def claim(
    q: query.Query, dispatch_id: str, *, now_ms: int, owner: str, token: str, lease_ms: int
) -> records.Claim:
    """Claim one row with the caller's token; the same token replays an unexpired lease."""
    found = await rows.read_row(q, dispatch_id, lock=True)
    if found is None:
        return records.Claim(outcome=Outcome.NOT_FOUND, dispatch_id=dispatch_id)
    (claimed,) = await _claim_page(
        q, [found], now_ms=now_ms, owner=owner, lease_ms=lease_ms, token=token
    )
    return claimed


async def _claim_page(
    q: query.Query,
    page: Sequence[Observed],
    *,
    now_ms: int,
    owner: str,
    lease_ms: int,
    token: str | None,
) -> tuple[records.Claim, ...]:
    """Decide each observed row in the domain and write what it decided, in page order.

    `token` is the caller's (a single claim, which may replay it); a page draws a fresh one
    per row it leases.
    """
    claims: dict[str, records.Claim] = {}
    to_lease: list[tuple[records.Execution, records.Dispatch, str]] = []
    for execution, dispatch in page:
        step, outcome, reason = fencing.claim_step(
            execution, now_ms=now_ms, owner=owner, token=token
        )
        dispatch_id = execution.dispatch_id
        if step is fencing.ClaimStep.LEASE:
            to_lease.append((execution, dispatch, token or ids.new_lease_token()))
        elif step is fencing.ClaimStep.EXHAUST:
            claims[dispatch_id] = await _exhaust(q, execution, reason=reason, now_ms=now_ms)
        elif outcome is Outcome.REPLAYED:
            lease = fencing.lease_of(execution)
            claims[dispatch_id] = records.Claim(
                outcome=outcome, dispatch_id=dispatch_id, lease=lease, dispatch=dispatch
            )
        else:
            claims[dispatch_id] = records.Claim(
                outcome=outcome, dispatch_id=dispatch_id, reason=reason
            )
    if to_lease:
        claims.update(await _lease(q, to_lease, now_ms=now_ms, owner=owner, lease_ms=lease_ms))
    return tuple(claims[execution.dispatch_id] for execution, _ in page)


async def _lease(
    q: query.Query,
    to_lease: Sequence[tuple[records.Execution, records.Dispatch, str]],
    *,
    now_ms: int,
    owner: str,
    lease_ms: int,
) -> dict[str, records.Claim]:
    """Lease rows the domain found claimable: one statement for the whole page.

    One fenced set update (`lease_page`, a JSON array of the rows, versions, fresh tokens and
    their proofs) names the rows it leased; the database writes their ledger lines; any other
    row raced. One statement a page, where a batch of one update per row cost the server a
    statement each (docs/performance.md).
    """
    expires = now_ms + lease_ms
    page = [
        {
            "dispatch_id": e.dispatch_id,
            "version": e.version,
            "token": token,
            "proof": ids.lease_proof(token),
        }
        for e, _, token in to_lease
    ]
    leased = {
        row["dispatch_id"]: row
        for row in await q.all(
            "lease_page",
            {
                "page": json.dumps(page),
                "now_ms": now_ms,
                "owner": owner,
                "expires_at_ms": expires,
            },
        )
    }
    claims: dict[str, records.Claim] = {}
    for execution, dispatch, token in to_lease:
        dispatch_id = execution.dispatch_id
        done = leased.get(dispatch_id)
        if done is None:
            claims[dispatch_id] = records.Claim(
                outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced"
            )
            continue
        lease = records.Lease(
            dispatch_id=dispatch_id,
            attempt=done["attempt"],
            owner=owner,
            token=token,
            version=done["version"],
            expires_at_ms=expires,
        )
        claims[dispatch_id] = records.Claim(
            outcome=Outcome.CLAIMED,
            dispatch_id=dispatch_id,
            lease=lease,
            dispatch=dispatch,
            taken_over=_taken_over(execution, token),
        )
    return claims


def _taken_over(execution: records.Execution, token: str) -> records.Takeover | None:
    """The expired lease a claim replaced, as the claim's own observation read it.

    `lease_page` took the row only at the version observed, so the owner and expiry read by
    `claim_due_rows` (or `lock_execution`) are exactly those it replaced: no extra read.
    """
    if (
        execution.status is not ExecutionStatus.LEASED
        or execution.lease_owner is None
        or execution.lease_expires_at_ms is None
        or execution.lease_token == token
    ):
        return None
    return records.Takeover(
        owner=execution.lease_owner, expires_at_ms=execution.lease_expires_at_ms
    )


async def _exhaust(
    q: query.Query, execution: records.Execution, *, reason: str | None, now_ms: int
) -> records.Claim:
    """Block a due row whose attempts are spent (rare: one statement; the database writes its
    ledger line). A lease this process holds presents its proof; another's must have expired
    on the database clock too."""
    dispatch_id = execution.dispatch_id
    token = execution.lease_token
    done = await q.one(
        "exhaust_row",
        {
            "dispatch_id": dispatch_id,
            "version": execution.version,
            "now_ms": now_ms,
            "result_code": reason,
            "proof": None if token is None else ids.lease_proof(token),
        },
    )
    if done is None:
        return records.Claim(outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced")
    return records.Claim(outcome=Outcome.EXHAUSTED, dispatch_id=dispatch_id, reason=reason)


# -- renew and the start barrier -----------------------------------------------------------


async def renew(
    q: query.Query, lease: records.Lease, *, now_ms: int, lease_ms: int
) -> records.Renewal:
    """Extend an unexpired lease (leased or executing) that carries the exact version."""
    found = await rows.read_row(q, lease.dispatch_id, lock=True)
    if found is None:
        return records.Renewal(outcome=Outcome.NOT_FOUND, reason="not_found")
    refusal = fencing.renew_refusal(found[0], lease, now_ms=now_ms)
    if refusal is not None:
        outcome = Outcome.EXPIRED if refusal == "lease_expired" else Outcome.CONFLICT
        return records.Renewal(outcome=outcome, reason=refusal)
    done = await q.one(
        "renew_lease",
        {
            "dispatch_id": lease.dispatch_id,
            "version": lease.version,
            "owner": lease.owner,
            "token": lease.token,
            "proof": ids.lease_proof(lease.token),
            "attempt": lease.attempt,
            "now_ms": now_ms,
            "expires_at_ms": now_ms + lease_ms,
        },
    )
    if done is None:
        return records.Renewal(outcome=Outcome.CONFLICT, reason="raced")
    renewed = records.Lease(
        dispatch_id=lease.dispatch_id,
        attempt=lease.attempt,
        owner=lease.owner,
        token=lease.token,
        version=done["version"],
        expires_at_ms=done["lease_expires_at_ms"],
    )
    return records.Renewal(outcome=Outcome.RENEWED, lease=renewed)


def start_params(request: records.StartRequest, *, now_ms: int, lease_ms: int) -> query.Params:
    """The parameters of `start_row` (and of PostgreSQL's one-statement `start_fast`)."""
    lease = request.lease
    return {
        "dispatch_id": lease.dispatch_id,
        "approval_request_id": request.approval_request_id,
        "action_digest": request.action_digest,
        "version": lease.version,
        "owner": lease.owner,
        "token": lease.token,
        "proof": ids.lease_proof(lease.token),
        "attempt": lease.attempt,
        "now_ms": now_ms,
        "expires_at_ms": fencing.start_lease_expiry(lease, now_ms=now_ms, lease_ms=lease_ms),
    }


def started(request: records.StartRequest, done: Any, *, now_ms: int) -> records.StartResult:
    """The result of a barrier that committed: `done` is the row `start_row` returned."""
    identity = fencing.started_identity(
        request.lease,
        started_at_ms=now_ms,
        version=done["version"],
        lease_expires_at_ms=done["lease_expires_at_ms"],
    )
    return records.StartResult(
        outcome=Outcome.STARTED, dispatch_id=request.lease.dispatch_id, identity=identity
    )


async def start(
    q: query.Query, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
) -> list[records.StartResult]:
    """Commit the start barrier of each request; each item stands or falls on its own fence.
    Several distinct items go as one set statement; only an item it did not start is read, to
    say why. A dispatch named twice goes item by item (the second one replays the first)."""
    if len({r.lease.dispatch_id for r in requests}) < max(len(requests), 2):
        return [await _start_one(q, r, now_ms=now_ms, lease_ms=lease_ms) for r in requests]
    done = await pages.start_set(q, requests, now_ms=now_ms, lease_ms=lease_ms)
    return [
        records.StartResult(
            outcome=Outcome.STARTED,
            dispatch_id=r.lease.dispatch_id,
            identity=done[r.lease.dispatch_id],
        )
        if r.lease.dispatch_id in done
        else await _start_refused(q, r, now_ms=now_ms)
        for r in requests
    ]


async def _start_one(
    q: query.Query, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult:
    # The happy path is the one fenced update; only a miss reads the row, to say why.
    done = await q.one("start_row", start_params(request, now_ms=now_ms, lease_ms=lease_ms))
    if done is None:
        return await _start_refused(q, request, now_ms=now_ms)
    return started(request, done, now_ms=now_ms)


async def _start_refused(
    q: query.Query, request: records.StartRequest, *, now_ms: int
) -> records.StartResult:
    """The fenced update matched nothing: read the row locked and let the domain say why."""
    dispatch_id = request.lease.dispatch_id
    found = await rows.read_row(q, dispatch_id, lock=True)
    if found is None:
        return records.StartResult(
            outcome=Outcome.NOT_FOUND, dispatch_id=dispatch_id, reason="not_found"
        )
    execution, dispatch = found
    outcome, reason = fencing.start_check(execution, dispatch, request, now_ms=now_ms)
    if outcome is Outcome.REPLAYED:
        identity = fencing.identity_of(execution)
        return records.StartResult(outcome=outcome, dispatch_id=dispatch_id, identity=identity)
    if outcome is None:
        # The update missed a row the domain would start: it changed in between (a version
        # only grows, so it cannot match again). Refuse; the caller's next tick sees it.
        return records.StartResult(
            outcome=Outcome.CONFLICT, dispatch_id=dispatch_id, reason="raced"
        )
    return records.StartResult(outcome=outcome, dispatch_id=dispatch_id, reason=reason)


# -- reads -------------------------------------------------------------------------------


async def list_due(
    q: query.Query, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
) -> list[records.Execution]:
    """A keyset page of the due index, read only (no locks)."""
    first = after or _BEFORE_ALL
    keyset = {"after_eligible_at_ms": first[0], "after_dispatch_id": first[1]}
    found = await q.all("select_due", {"now_ms": now_ms, "limit": limit, **keyset})
    return [records.Execution.from_row(row) for row in found]


async def counts(q: query.Query, *, now_ms: int) -> records.StatusCounts:
    """Counts per effective status, due backlog and oldest due age (one snapshot; the
    actions that own tables count their rows, Runs among them, in the same snapshot)."""
    per_status = {states.EffectiveStatus(s.value): 0 for s in ExecutionStatus}
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = 0
    for row in await q.all("count_by_status"):
        per_status[states.EffectiveStatus(row["status"])] = row["n"]
    recovery = (await q.one("count_recovery_required", {"now_ms": now_ms}))["n"]
    per_status[states.EffectiveStatus.RECOVERY_REQUIRED] = recovery
    per_status[states.EffectiveStatus.EXECUTING] -= recovery
    due = await q.one("due_summary", {"now_ms": now_ms})
    expired = await q.all("expired_leases_by_owner", {"now_ms": now_ms, "owners": EXPIRED_OWNERS})
    oldest = due["oldest"]
    return records.StatusCounts(
        executions=per_status,
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        runs=0,
        expired_leases=expired[0]["total"] if expired else 0,
        expired_lease_owners={row["owner"]: row["n"] for row in expired},
    )


async def backlog(q: query.Query, *, now_ms: int, cap: int = ports.BACKLOG_CAP) -> records.Backlog:
    """The metrics gauges, from queries bounded by the due cap and the started rows."""
    due = await q.one("backlog_due", {"now_ms": now_ms, "cap": cap})
    started_rows = await q.one("backlog_started", {"now_ms": now_ms})
    oldest = due["oldest"]
    return records.Backlog(
        due=due["n"],
        oldest_due_age_ms=None if oldest is None else max(0, now_ms - oldest),
        executing=started_rows["n"] - started_rows["expired"],
        recovery_required=started_rows["expired"],
    )


async def events(q: query.Query, dispatch_id: str) -> list[records.ExecutionEvent]:
    """The history of one execution."""
    found = await q.all("select_events", {"dispatch_id": dispatch_id})
    return [records.ExecutionEvent.from_row(row) for row in found]
