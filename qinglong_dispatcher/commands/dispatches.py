"""Dispatches: `dispatch list` (newest first, in keyset pages), `dispatch show ID`,
`dispatch cancel ID` and `dispatch resubmit ID` (`commands/resubmits.py`).

List and show only read: they open the store as `status` does and write nothing. Neither
prints a lease token, and a plan only as its redacted preview (`plan_previews`). `show --plan`
prints the whole plan to a plan reader, audited (`commands/previews.py`). Cancel is the
operator's one write here, decided by the store under the claim's fence (`usecases.cancelling`).
"""

from __future__ import annotations

import argparse
import datetime
import json

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.bootstrap import tools
from qinglong_dispatcher.commands import common, moments, previews, resubmits
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import dispatch_views, errors, freezes, plans, states, waits
from qinglong_dispatcher.usecases import cancelling


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).isoformat(
        timespec="milliseconds"
    )


def list_query(args: argparse.Namespace) -> dispatch_views.ListQuery:
    """The page `dispatch list` asks for; bad input is `InvalidInput` or a usage error (exit
    2), before the store."""
    from_ms, to_ms = moments.created_range(args, clock.SystemClock().now_ms())
    if args.target is not None:
        plans.require_identifier("target", args.target)
    return dispatch_views.ListQuery(
        status=None if args.status is None else states.EffectiveStatus(args.status),
        action_type=args.action,
        project_id=args.project,
        limit=args.limit,
        after=None if args.after is None else dispatch_views.Cursor.parse(args.after),
        target=args.target,
        from_ms=from_ms,
        to_ms=to_ms,
    )


async def cmd_dispatch(settings: Settings, args: argparse.Namespace) -> int:
    """`dispatch list`, `dispatch show` or `dispatch cancel`."""
    if args.dispatch_command == "show":
        return await _show(settings, args)
    if args.dispatch_command == "cancel":
        return await _cancel(settings, args)
    if args.dispatch_command == "resubmit":
        return await resubmits.cmd_resubmit(settings, args)
    if args.dispatch_command == "lift-freeze":
        return await _lift(settings, args)
    request = list_query(args)
    store = await common.open_store(settings)
    try:
        page = await store.list_dispatches(request, now_ms=clock.SystemClock().now_ms())
    finally:
        await store.close()
    cursor = None if page.next is None else str(page.next)
    if args.json:
        common.print_json(
            {"dispatches": [row.as_dict() for row in page.dispatches], "next": cursor}
        )
        return common.EXIT_OK
    if not page.dispatches:
        print("no dispatches")
        return common.EXIT_OK
    print(
        f"{'DISPATCH':<36} {'STATUS':<17} {'ACTION':<11} {'PROJECT':<12} ATTEMPT  "
        f"{'CREATED':<29}  RESULT"
    )
    for row in page.dispatches:
        print(
            f"{row.dispatch_id:<36} {row.status.value:<17} {row.action_type:<11} "
            f"{row.project_id:<12} {f'{row.attempt}/{row.max_attempts}':<8} "
            f"{_iso(row.created_at_ms):<29}  {row.result_code or '-'}"
            + ("" if row.waiting is None else f"  {row.waiting}")
            + ("" if row.wait is None else f"  {_wait(row.wait)}")
        )
    if cursor is not None:
        print(f"more: --after {cursor}")
    return common.EXIT_OK


async def _show(settings: Settings, args: argparse.Namespace) -> int:
    if args.plan:
        return await previews.show_full_plan(settings, args)
    dispatch_id: str = args.dispatch_id
    if not plans.is_identifier(dispatch_id):
        # Not echoed: it is not an id, and may hold anything.
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    shown = bootstrap.plan_preview_fields()
    store = await common.open_store(settings)
    try:
        detail = await store.show_dispatch(
            dispatch_id, now_ms=clock.SystemClock().now_ms(), shown=shown
        )
    finally:
        await store.close()
    if detail is None:
        raise errors.DispatchNotFound(f"dispatch {dispatch_id} not found")
    if args.json:
        common.print_json(detail.as_dict())
    else:
        for line in _lines(detail):
            print(line)
    return common.EXIT_OK


async def _lift(settings: Settings, args: argparse.Namespace) -> int:
    """Lift for one dispatch the freezes covering it now (the database refuses the requester,
    and anyone not an operator)."""
    dispatch_id: str = args.dispatch_id
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    try:
        reason = freezes.check_reason(args.reason)
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument --reason: {exc}") from exc
    store = await common.open_store(settings)
    try:
        lifted = await store.lift_freeze(dispatch_id, reason=reason)
    finally:
        await store.close()
    if args.json:
        common.print_json({"dispatch_id": dispatch_id, "lifted": lifted})
    elif lifted:
        print(f"{dispatch_id}: lifted freeze {', '.join(str(f) for f in lifted)}")
    else:
        print(f"{dispatch_id}: no freeze covers it")
    return common.EXIT_OK


async def _cancel(settings: Settings, args: argparse.Namespace) -> int:
    dispatch_id: str = args.dispatch_id
    if not plans.is_identifier(dispatch_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    operator: str = args.operator or tools.os_user()
    store = await common.open_store(settings)
    try:
        done = await cancelling.cancel_dispatch(
            store, clock.SystemClock(), dispatch_id, operator=operator, reason=args.reason
        )
    finally:
        await store.close()
    if args.json:
        common.print_json(
            {
                "dispatch_id": dispatch_id,
                "status": states.ExecutionStatus.CANCELLED.value,
                "version": done.version,
                "operator": operator,
                "reason": args.reason,
            }
        )
    else:
        print(f"{dispatch_id} cancelled")
    return common.EXIT_OK


def _wait(wait: waits.Wait) -> str:
    """`frozen_by F` or `not_before T`."""
    if wait.freeze_id is not None:
        return f"{waits.FROZEN_BY} {wait.freeze_id}"
    return f"{waits.NOT_BEFORE} {_iso(wait.not_before_ms)}"


def _lines(detail: dispatch_views.Detail) -> list[str]:
    """`dispatch show` as text: one labelled line per fact, the ledger one line per event."""
    d, e = detail.dispatch, detail.execution
    plan = previews.preview_text(detail.plan, detail.plan_code)
    status = e.effective_status.value
    if e.effective_status.value != e.status.value:
        status += f" (stored {e.status.value}, lease expired)"
    lines = [
        f"{'dispatch':<12} {d.dispatch_id}",
        f"{'approval':<12} {d.approval_request_id} (approved by {d.approved_by})",
        f"{'project':<12} {d.project_id}",
        f"{'action':<12} {d.action_type} {d.action_ref}",
        f"{'digest':<12} {d.action_digest}",
        f"{'created':<12} {_iso(d.created_at_ms)}",
        f"{'plan':<12} {plan}",
        f"{'status':<12} {status}",
        f"{'target':<12} {d.target or '-'}"
        + ("" if d.target is None else f" (on unknown: {e.on_unknown})")
        + ("" if e.waiting_for_target is None else f" ({e.waiting_for_target})"),
        f"{'window':<12} "
        + (
            "-"
            if e.window is None
            else f"{_iso(e.window.not_before_ms)} … {_iso(e.window.not_after_ms)}"
        )
        + ("" if e.wait is None else f" ({_wait(e.wait)})"),
        f"{'attempt':<12} {e.attempt}/{e.max_attempts} (version {e.version})",
        f"{'takeovers':<12} {e.takeovers}/{e.max_takeovers}",
        f"{'lease':<12} {e.lease_owner or '-'} until {_iso(e.lease_expires_at_ms)}",
        f"{'started':<12} {_iso(e.started_at_ms)}",
        f"{'completed':<12} {_iso(e.completed_at_ms)}",
        f"{'result':<12} {e.result_code or '-'}",
        f"{'run':<12} {detail.run_id or '-'}",
    ]
    if detail.receipt is not None:
        r = detail.receipt
        lines.append(
            f"{'receipt':<12} {r.outcome} {r.result_code} → {r.resource_type} {r.resource_id}"
            f" (attempt {r.execution_attempt}, evidence {r.evidence_digest[:16]}…)"
        )
    if e.receipt is not None:
        shown = json.dumps(e.receipt, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lines.append(f"{'receipt':<12} {shown} (digest {(e.receipt_digest or '')[:16]}…)")
    if detail.step_run is not None:
        s = detail.step_run
        lines.append(
            f"{'step run':<12} {s.step_run_id} {s.status.value} v{s.version} "
            f"({s.tool_id}@{s.tool_version}, run {s.run_id})"
            + (f" {s.result_code}" if s.result_code else "")
        )
    if detail.observation is not None:
        o = detail.observation
        # The words first (`evidence` below): a code alone reads "missing" as "did not happen".
        lines.append(
            f"{'observed':<12} ×{o.count}, last {_iso(o.last_seen_at_ms)} "
            f"(code {o.outcome.value}/{o.reason_code})"
        )
    if detail.resolution is not None:
        res = detail.resolution
        lines.append(
            f"{'resolved':<12} {res.resolution.value} by {res.resolved_by} "
            f"({res.source.value}, principal {res.principal}, reason {res.reason_code}) "
            f"at {_iso(res.committed_at_ms)}"
        )
    if detail.uncertain is not None:
        u = detail.uncertain
        lines.append(
            f"{'lost track':<12} {u.result_code} (attempt {u.attempt}, {u.lease_owner}) "
            f"at {_iso(u.recorded_at_ms)}"
        )
        for label, value in u.lines():
            lines.append(f"  {label}: {value!r}" if "\n" in value else f"  {label}: {value}")
    for said in detail.verdicts():
        lines.append(f"{'evidence':<12} {said}")
    if detail.resubmitted_from is not None:
        lines.append(f"{'again from':<12} {detail.resubmitted_from}")
    if detail.requested_again:
        lines.append(f"{'again as':<12} {', '.join(detail.requested_again)}")
    for audit in detail.audit:
        lines.append(
            f"{'audit':<12} {audit.kind} {audit.detail_code} by {audit.actor} "
            f"(principal {audit.principal}) at {_iso(audit.committed_at_ms)}"
            + ("" if audit.comment is None else f" {json.dumps(audit.comment, ensure_ascii=False)}")
        )
    lines.append("events")
    for ev in detail.events:
        before = "-" if ev.from_status is None else ev.from_status.value
        lines.append(
            f"  v{ev.version:<3} {before:>10} → {ev.to_status.value:<10} attempt {ev.attempt}  "
            f"{ev.by or '-'}  {_iso(ev.committed_at_ms)}"
            + (f"  {ev.result_code}" if ev.result_code else "")
            + (f"  (settled by {ev.settled_by})" if ev.settled_by else "")
            + (f"  (noticed by {ev.noticed_by})" if ev.noticed_by else "")
        )
    return lines


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`dispatch list|show|cancel` and their options."""
    dispatch_sub = p.add_subparsers(dest="dispatch_command", metavar="STEP", required=True)
    d: argparse.ArgumentParser = dispatch_sub.add_parser(
        "list", parents=[shared], help="dispatches newest first, in pages (--after CURSOR)"
    )
    d.add_argument(
        "--status",
        choices=[s.value for s in states.EffectiveStatus],
        help="effective status (recovery_required: executing with an expired lease)",
    )
    d.add_argument("--action", metavar="TYPE", help="action type (built in or installed)")
    d.set_defaults(action_option=True)
    d.add_argument("--project", metavar="P", help="project id")
    d.add_argument("--target", metavar="T", help="only dispatches of this target")
    moments.add_range_arguments(d, "dispatches")
    d.add_argument(
        "--limit",
        type=int,
        default=dispatch_views.DEFAULT_LIMIT,
        metavar="N",
        help=f"rows per page, 1…{dispatch_views.MAX_LIMIT} ({dispatch_views.DEFAULT_LIMIT})",
    )
    d.add_argument(
        "--after",
        metavar="CURSOR",
        help=f"the page after this {dispatch_views.CURSOR_FORMAT} (`next` of the last page)",
    )
    d.add_argument("--json", action="store_true")
    d = dispatch_sub.add_parser(
        "show", parents=[shared], help="one dispatch: plan, execution, ledger, receipt, Run"
    )
    d.add_argument("dispatch_id", metavar="DISPATCH_ID")
    d.add_argument(
        "--plan",
        action="store_true",
        help="print the whole plan instead (a plan reader's login; audited)",
    )
    d.add_argument("--json", action="store_true")
    d = dispatch_sub.add_parser(
        "cancel",
        parents=[shared],
        help="cancel a pending or retry_wait dispatch as an authenticated operator (audited)",
    )
    d.add_argument("dispatch_id", metavar="DISPATCH_ID")
    d.add_argument("--reason", required=True, metavar="CODE", help="low-sensitivity reason code")
    d.add_argument("--operator", metavar="W", help="operator name (audited; default the OS user)")
    d.add_argument("--json", action="store_true", help="print the result as one JSON line")
    resubmits.add_arguments(dispatch_sub, shared)
    d = dispatch_sub.add_parser(
        "lift-freeze",
        parents=[shared],
        help="lift the freezes covering one dispatch, for it alone, as an operator who is not "
        "its requester (audited)",
    )
    d.add_argument("dispatch_id", metavar="DISPATCH_ID")
    d.add_argument("--reason", required=True, metavar="R", help="why (1…200 characters)")
    d.add_argument("--json", action="store_true", help="print the result as one JSON line")
