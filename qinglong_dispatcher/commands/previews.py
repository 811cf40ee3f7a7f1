"""Plans and requests as people see them: `approval list` and `approval show`, previews as
text, `dispatch show ID --plan`.

`approval list` prints each waiting request with its plan's redacted preview, `dispatch show`
the preview as one line of text, `--plan` the whole plan. A preview never holds a sensitive
value (`domain/plan_previews.py`); the whole plan is read only through the store's audited
read, which on PostgreSQL only a plan reader's login may make. Nothing here logs a plan.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
from collections.abc import Mapping

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.commands import common, moments
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import approval_views, canonical, errors, plans


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds"
    )


def _value(value: object) -> str:
    if isinstance(value, dict) and value.get("redacted") is True:
        return f"<redacted {value.get('bytes')} B {value.get('digest')}>"
    if isinstance(value, str) and value.isprintable():
        return value
    # Anything else as JSON: a control character is escaped, never sent to the terminal.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def preview_text(plan: Mapping[str, object] | None, code: str | None) -> str:
    """A preview as one line (`name=value`, a redacted member as `<redacted N B digest>`);
    `- (code)` when the plan cannot be shown."""
    if plan is None:
        return f"- ({code})" if code else "-"
    return " ".join(f"{name}={_value(value)}" for name, value in plan.items() if value is not None)


def list_query(args: argparse.Namespace) -> approval_views.ListQuery:
    """The page `approval list` asks for; bad input is `InvalidInput` (exit 2), before the store."""
    from_ms, to_ms = moments.created_range(args, clock.SystemClock().now_ms())
    return approval_views.ListQuery(
        action_type=args.action,
        project_id=args.project,
        limit=args.limit,
        after=None if args.after is None else approval_views.Cursor.parse(args.after),
        status=args.status,
        from_ms=from_ms,
        to_ms=to_ms,
    )


async def cmd_approval_list(settings: Settings, args: argparse.Namespace) -> int:
    """`approval list`: requests of one status (the waiting ones by default), newest first, each
    with its plan's preview and, once decided, who decided, how and when."""
    request = list_query(args)
    shown = bootstrap.plan_preview_fields()
    store = await common.open_store(settings)
    try:
        page = await store.list_waiting_approvals(
            request, now_ms=clock.SystemClock().now_ms(), shown=shown
        )
    finally:
        await store.close()
    cursor = None if page.next is None else str(page.next)
    if args.json:
        common.print_json({"approvals": [row.as_dict() for row in page.approvals], "next": cursor})
        return common.EXIT_OK
    if not page.approvals:
        waiting = request.status == approval_views.WAITING
        print("no waiting approvals" if waiting else f"no approvals ({request.status})")
        return common.EXIT_OK
    for row in page.approvals:
        status = "" if request.status == approval_views.WAITING else f"{row.status}  "
        print(
            f"{row.approval_request_id}  {status}{row.action_type}  {row.project_id}  "
            f"requested by {row.requested_by} ({row.requested_principal})  "
            f"created {_iso(row.created_at_ms)}  expires {_iso(row.expires_at_ms)}"
        )
        if (window := row.narrowing.text()) is not None:
            print(f"  window {window}")
        if row.decided_by is not None:
            when = "" if row.decided_at_ms is None else f" at {_iso(row.decided_at_ms)}"
            print(
                f"  decided by {row.decided_by} ({row.decided_principal or '-'})"
                f"  why {row.decision_code or '-'}{when}"
            )
        for said in row.reasons:
            print(f"  {said.decision} by {said.principal}: {approval_views.reason_text(said)}")
        print(f"  plan {preview_text(row.plan, row.plan_code)}")
    if cursor is not None:
        print(f"more: --after {cursor}")
    return common.EXIT_OK


async def cmd_approval_show(settings: Settings, args: argparse.Namespace) -> int:
    """`approval show ID`: one request and its status (`expired` once a reconcile pass saw its
    lifetime run out on the database's clock)."""
    approval_request_id: str = args.approval_request_id
    if not plans.is_identifier(approval_request_id):
        raise errors.ApprovalNotFound("no approval request has this id (not a request id)")
    store = await common.open_store(settings)
    try:
        found = await store.get_approval(approval_request_id)
        again = await store.requested_again(approval_request_id)
    finally:
        await store.close()
    if found is None:
        raise errors.ApprovalNotFound(f"approval request {approval_request_id} not found")
    if args.json:
        shown = dataclasses.asdict(found)
        common.print_json({**shown, "status": found.status.value, "requested_again": list(again)})
        return common.EXIT_OK
    decided = "-" if found.decided_by is None else f"{found.decided_by} ({found.decided_principal})"
    print(
        f"{found.approval_request_id}  {found.status.value}@v{found.version}  "
        f"{found.action_type}  {found.project_id}  "
        f"requested by {found.requested_by} ({found.requested_principal})  decided by {decided}  "
        f"created {_iso(found.created_at_ms)}  expires {_iso(found.expires_at_ms)}"
        + ("" if (window := found.narrowing.text()) is None else f"  window {window}")
        + ("" if found.resubmitted_from is None else f"  again from {found.resubmitted_from}")
        + (f"  again as {', '.join(again)}" if again else "")
    )
    return common.EXIT_OK


async def show_full_plan(settings: Settings, args: argparse.Namespace) -> int:
    """`dispatch show ID --plan`: the whole plan, for a plan reader, audited (the store writes
    the `plan.read` audit row in the read's transaction)."""
    dispatch_id: str = args.dispatch_id
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    store = await common.open_store(settings)
    try:
        found = await store.read_full_plan(dispatch_id)
    finally:
        await store.close()
    if found is None:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    if found.unreadable is not None:
        # The read was audited; what it read does not open here (a missing or wrong key ring).
        raise errors.QinglongError(
            f"the plan of dispatch {dispatch_id} cannot be opened ({found.unreadable})",
            code=found.unreadable,
        )
    plan = canonical.loads(found.plan_json)
    if args.json:
        common.print_json(
            {"dispatch_id": dispatch_id, "action_type": found.action_type, "plan": plan}
        )
    else:
        print(canonical.dumps(plan).decode("utf-8"))
    return common.EXIT_OK
