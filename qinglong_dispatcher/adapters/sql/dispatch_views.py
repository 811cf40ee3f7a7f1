"""Read transactions of `dispatch list`, `dispatch show` and `submit`'s Run ids; they write nothing.

The effective status is decided as everywhere else (`count_recovery_required`): a started
lease has expired only when the caller's clock and the database's both say so. The database
clock is read once, and the same settling instant filters and labels every row of a page.
None of the statements here selects a lease token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from qinglong_dispatcher.adapters.sql import plan_reads, query, recovery, uncertain_outcomes
from qinglong_dispatcher.domain import (
    activity,
    dispatch_views,
    ledger_lines,
    plan_previews,
    records,
)
from qinglong_dispatcher.domain import recovery as recovery_records
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes
from qinglong_dispatcher.ports import action_tables

_CLEAR: Final = plan_envelopes.Envelopes(None)
"""A store without a key ring: plans in clear, plain digests."""

_NEWEST: Final = dispatch_views.Cursor(created_at_ms=2**63 - 1, dispatch_id="")
"""A keyset position before every dispatch in the newest-first order."""


async def list_dispatches(
    q: query.Query, request: dispatch_views.ListQuery, *, now_ms: int
) -> dispatch_views.Page:
    """A page, newest first, after `request.after`; one row more is read to know if it is last."""
    settling_ms = await recovery.settling_ms(q, now_ms)
    stored_status, lease_expired = (
        (None, None) if request.status is None else dispatch_views.stored_condition(request.status)
    )
    after = request.after or _NEWEST
    found = await q.all(
        "list_dispatches",
        {
            "after_created_at_ms": after.created_at_ms,
            "after_dispatch_id": after.dispatch_id,
            "project_id": request.project_id,
            "action_type": request.action_type,
            "stored_status": None if stored_status is None else stored_status.value,
            "lease_expired": lease_expired,
            "settling_ms": settling_ms,
            "limit": request.limit + 1,
            "target": request.target,
            "from_ms": request.from_ms,
            "to_ms": request.to_ms,
        },
    )
    shown = tuple(
        dispatch_views.DispatchSummary.from_row(row, settling_ms=settling_ms)
        for row in found[: request.limit]
    )
    more = len(found) > request.limit
    return dispatch_views.Page(dispatches=shown, next=shown[-1].cursor if more else None)


async def show_dispatch(
    q: query.Query,
    dispatch_id: str,
    tables: Sequence[action_tables.ActionTables],
    *,
    now_ms: int,
    shown: plan_previews.ShownFields = plan_previews.IDENTITY_ONLY,
    envelopes: plan_envelopes.Envelopes = _CLEAR,
) -> dispatch_views.Detail | None:
    """Everything about one dispatch, its plan as a redacted preview, or None when there is
    no such dispatch (`shown`: the members shown per action type; `envelopes`: how the store
    opens a sealed plan and digests a redacted member; `tables`: the actions' own rows)."""
    row = await q.one("select_dispatch_view", {"dispatch_id": dispatch_id})
    if row is None:
        return None
    settling_ms = await recovery.settling_ms(q, now_ms)
    dispatch = records.Dispatch.from_joined_row(row)
    observation = recovery_records.Observation.from_joined_row(row)
    stored = await plan_reads.get_plan(q, dispatch.project_id, dispatch.action_ref)
    plan, plan_code = plan_reads.preview(stored, shown, envelopes)
    events = await q.all("select_event_views", {"dispatch_id": dispatch_id})
    request = await q.one("select_approval", {"approval_request_id": dispatch.approval_request_id})
    part = action_tables.DetailPart()
    for own in tables:
        part = await own.detail(q, dispatch, part)
    return dispatch_views.Detail(
        dispatch=dispatch,
        plan=plan,
        plan_code=plan_code,
        execution=dispatch_views.ExecutionView.from_row(row, settling_ms=settling_ms),
        events=tuple(ledger_lines.EventView.from_row(event) for event in events),
        receipt=part.receipt,
        run_id=part.run_id,
        observation=observation,
        resolution=await recovery.get_resolution(q, dispatch_id),
        audit=tuple(await recovery.audit_events(q, dispatch_id)),
        step_run=part.step_run,
        uncertain=await uncertain_outcomes.uncertain_outcome(q, dispatch_id),
        resubmitted_from=None if request is None else request["resubmitted_from"],
        requested_again=await requested_again(q, dispatch_id),
    )


async def requested_again(q: query.Query, source_id: str) -> tuple[str, ...]:
    """The requests made again from `source_id` (a dispatch, or an expired request), oldest
    first."""
    found = await q.all("select_requested_again", {"source_id": source_id})
    return tuple(str(row["approval_request_id"]) for row in found)


async def recent_activity(
    q: query.Query, *, requested_since_ms: int, settled_since_ms: int, limit: int
) -> activity.Activity:
    """New approval requests and settled dispatches, each at or after its own time, oldest
    first, at most `limit` of each (one snapshot)."""
    requested = await q.all(
        "select_recent_requests",
        {"floor_id": activity.approval_id_floor(requested_since_ms), "limit": limit},
    )
    settled = await q.all("select_recent_settled", {"since_ms": settled_since_ms, "limit": limit})
    return activity.Activity(
        requested=tuple(
            activity.Requested(
                approval_request_id=row["approval_request_id"],
                project_id=row["project_id"],
                action_type=row["action_type"],
                requested_by=row["requested_by"],
                created_at_ms=row["created_at_ms"],
            )
            for row in requested
        ),
        settled=tuple(
            activity.Settled(
                dispatch_id=row["dispatch_id"],
                project_id=row["project_id"],
                action_type=row["action_type"],
                status=row["status"],
                result_code=row["result_code"],
                settled_at_ms=row["updated_at_ms"],
            )
            for row in settled
        ),
        limit=limit,
    )
