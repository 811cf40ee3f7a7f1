"""Read transactions that show plans: redacted previews, and the whole plan audited.

`approval list` and `dispatch show` get previews; `dispatch show --plan` the whole plan. A plan
leaves the store as its preview (`domain/plan_previews.py`), computed here from the
opened plaintext and the shown members per action type the caller passes in (the plan
models live above the store). The whole plan leaves it only through `read_full_plan`, whose
audit row commits with the read or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approval_views, plan_previews
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes


async def get_plan(q: query.Query, project_id: str, action_ref: str) -> ports.StoredPlan | None:
    """The immutable plan of (project, action ref), or None."""
    row = await q.one("select_plan", {"project_id": project_id, "action_ref": action_ref})
    return None if row is None else ports.StoredPlan.from_row(row)


async def get_plans(q: query.Query, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
    """The plans of many keys in one read; missing ones are left out."""
    # Two JSON arrays of equal length: the one list form both dialects can bind as one value.
    params = {
        "project_ids": json.dumps([k[0] for k in keys]),
        "action_refs": json.dumps([k[1] for k in keys]),
    }
    return [ports.StoredPlan.from_row(row) for row in await q.all("select_plans", params)]


def preview(
    stored: ports.StoredPlan | None,
    shown: plan_previews.ShownFields,
    envelopes: plan_envelopes.Envelopes,
) -> tuple[dict[str, object] | None, str | None]:
    """A stored plan's preview, or None and the code that says why it cannot be shown."""
    if stored is None:
        return None, plan_previews.MISSING
    opened = envelopes.open(stored)
    if opened.unreadable is not None:
        return None, opened.unreadable
    shown_plan = plan_previews.preview_of(
        opened.action_type, opened.plan_json, shown, envelopes.digests
    )
    return (None, plan_previews.UNREADABLE) if shown_plan is None else (shown_plan, None)


async def list_waiting_approvals(
    q: query.Query,
    request: approval_views.ListQuery,
    *,
    now_ms: int,
    shown: plan_previews.ShownFields,
    envelopes: plan_envelopes.Envelopes,
) -> approval_views.Page:
    """A page of requests of the asked status (waiting ones by default), newest first; one
    row more is read to know if it is last."""
    after = request.after or approval_views.NEWEST
    params: dict[str, object] = {
        "after_created_at_ms": after.created_at_ms,
        "after_approval_request_id": after.approval_request_id,
        "project_id": request.project_id,
        "action_type": request.action_type,
        "from_ms": request.from_ms,
        "to_ms": request.to_ms,
        "limit": request.limit + 1,
    }
    if request.status == approval_views.WAITING:
        found = await q.all("list_waiting_approvals", {**params, "now_ms": now_ms})
    elif request.status == approval_views.ALL:
        found = await q.all("list_all_approvals", params)
    else:
        # One status per statement: the index of migration 0036 keeps its order, so the
        # page stops at its limit.
        found = await q.all("list_approvals", {**params, "status": request.status})
    rows = []
    for row in found[: request.limit]:
        stored = None if row["plan_digest"] is None else ports.StoredPlan.from_row(row)
        plan, code = preview(stored, shown, envelopes)
        rows.append(approval_views.WaitingApproval.from_row(row, plan=plan, plan_code=code))
    shown_rows = tuple(rows)
    more = len(found) > request.limit
    return approval_views.Page(approvals=shown_rows, next=shown_rows[-1].cursor if more else None)


async def read_full_plan(
    q: query.Query, dispatch_id: str, *, principal: str | None
) -> ports.StoredPlan | None:
    """The whole plan row of a dispatch (sealed as stored) and its `plan.read` audit row, in
    one transaction; None, with nothing written, when there is no such dispatch.

    On PostgreSQL the database decides who may (a plan reader's login) and writes the audit
    row itself; on SQLite the OS user is the authority and `principal` names it."""
    row = await q.one("read_full_plan", {"dispatch_id": dispatch_id})
    if row is None:
        return None
    await q.run(
        "audit_plan_read",
        {
            "dispatch_id": dispatch_id,
            "principal": principal,
            "project_id": row["project_id"],
            "action_type": row["action_type"],
        },
    )
    return ports.StoredPlan.from_row(row)
