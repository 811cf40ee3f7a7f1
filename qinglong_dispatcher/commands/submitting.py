"""Approval commands: `submit` (create, approve and consume in one go) and `approval` steps."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio.to_thread

from qinglong_dispatcher import bootstrap, bounded_files, clock, ports
from qinglong_dispatcher.actions.tool_invoke import sandbox
from qinglong_dispatcher.actions.tool_invoke import tables as tool_invoke_tables
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import canonical, errors, ids, plans, traces, waits
from qinglong_dispatcher.domain.tools import registry as tool_registry
from qinglong_dispatcher.usecases import (
    approving,
    consuming,
    rejecting,
    requesting,
    submitting,
)

STEPS_HINT = (
    "use `approval create`, then `approval approve ID --by W` as another approver, "
    "then `approval consume ID`"
)


def _as_steps(exc: errors.ApprovalError) -> errors.ApprovalError:
    """`submit` approves its own request; where that is refused, point at the single steps."""
    if isinstance(exc, errors.SelfApprovalRefused):
        return errors.SelfApprovalRefused(
            f"submit approves its own request and self-approval is not allowed here: {STEPS_HINT}"
        )
    if isinstance(exc, errors.ApprovalNotPermitted):
        return errors.ApprovalNotPermitted(
            "submit approves, and this login may not approve (not a member of the "
            f"installation's _approver role): {STEPS_HINT}"
        )
    return exc


def _read_file(path: Path, max_bytes: int) -> bytes:
    """A file argument, bounded; every fault is one InvalidInput line naming the file."""
    try:
        return bounded_files.read_at_most(path, max_bytes)
    except bounded_files.TooLarge as exc:
        raise errors.InvalidInput(f"{path}: {exc}") from None
    except OSError as exc:
        raise errors.InvalidInput(f"{path}: cannot be read ({exc.__class__.__name__})") from None


def _jsonl_lines(data: bytes) -> list[str]:
    """The lines of a JSONL file, split on `\n` only.

    `str.splitlines` also splits on \v, \f, \x1c-\x1e, \x85 and U+2028/U+2029, which may
    sit inside a JSON string: the line would be cut in two and numbered wrongly. One `\r`
    before the `\n` is dropped, so a file saved with CRLF line ends reads the same.
    """
    lines = data.decode("utf-8").split("\n")
    return [line.removesuffix("\r") for line in lines]


def _read_jsonl(path: Path) -> list[plans.AnyPlan]:
    raw = _read_file(path, bounded_files.JSONL_MAX_BYTES)
    try:
        lines = _jsonl_lines(raw)
    except UnicodeDecodeError:
        raise errors.InvalidInput(f"{path}: cannot be read (not UTF-8)") from None
    result: list[plans.AnyPlan] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip(" \t"):  # JSON's own whitespace only: a lone \v is not blank
            continue
        try:
            data = canonical.loads(line)
            if not isinstance(data, dict):
                raise errors.PlanInvalid("plan invalid: a line must be one JSON object")
            forbidden = {"schemaVersion", "actionRef"} & data.keys()
            if forbidden:
                raise errors.PlanInvalid(f"plan invalid: {sorted(forbidden)[0]}: filled by submit")
            result.append(requesting.run_create_plan(data))
        except errors.InvalidInput as exc:
            raise errors.InvalidInput(f"{path}:{number}: {exc}") from None
    if not result:
        raise errors.InvalidInput(f"{path}: no plans")
    return result


async def _run_ids(store: ports.Store, dispatch_ids: list[str]) -> dict[str, str]:
    """The Runs that exist already (a running daemon may have been quicker than this read).

    The submit has committed: a failing read only leaves the Run ids unknown (`null`), it
    never turns the committed submit into an error that invites submitting again.
    """
    try:
        return await store.dispatch_run_ids(dispatch_ids)
    except errors.StoreError:
        return {}


TOOL_INVOKE = "tool.invoke"

PER_PLAN_FLAGS = ("project", "task", "revision", "executor", "priority", "task_name")
"""`submit run-create` options that describe one plan (None unless given)."""


async def cmd_submit(settings: Settings, args: argparse.Namespace) -> int:
    """Create plan + approval, approve, consume; print the dispatch id(s)."""
    if args.from_jsonl is not None:
        given = [f"--{n.replace('_', '-')}" for n in PER_PLAN_FLAGS if getattr(args, n) is not None]
        if given:
            # Each line is a whole plan: a flag beside the file would be silently ignored.
            raise common.UsageError(f"{', '.join(given)} cannot be combined with --from-jsonl")
        plan_list = _read_jsonl(args.from_jsonl)
    else:
        missing = [n for n in ("project", "task", "revision") if getattr(args, n) is None]
        if missing:
            # All at once: naming one per try makes a newcomer run it once per flag.
            named = ", ".join(f"--{n}" for n in missing)
            verb = "is" if len(missing) == 1 else "are"
            raise common.UsageError(f"{named} {verb} required without --from-jsonl")
        fields: dict[str, object] = {
            "projectId": args.project,
            "taskId": args.task,
            "taskRevision": args.revision,
            "executorType": args.executor or "shell",
            "priority": 0 if args.priority is None else args.priority,
        }
        if args.task_name is not None:
            fields["taskName"] = args.task_name
        plan_list = [requesting.run_create_plan(fields)]
    plans.require_identifier("requested-by", args.requested_by)
    plans.require_identifier("approved-by", args.approved_by)
    traceparent = traces.optional_traceparent(args.traceparent)
    narrowing = _narrowing(args)
    store = await common.open_store(settings)
    try:
        consumed = await submitting.submit(
            store,
            clock.SystemClock(),
            bootstrap.policy(settings),
            plan_list,
            requested_by=args.requested_by,
            approved_by=args.approved_by,
            traceparent=traceparent,
            narrowing=narrowing,
        )
        run_ids = await _run_ids(store, [c.dispatch_id for c in consumed])
    except (errors.SelfApprovalRefused, errors.ApprovalNotPermitted) as exc:
        raise _as_steps(exc) from None
    finally:
        await store.close()
    rows = [
        {
            "dispatch_id": c.dispatch_id,
            "approval_request_id": c.approval_request_id,
            "action_ref": c.action_ref,
            "run_id": run_ids.get(c.dispatch_id),
        }
        for c in consumed
    ]
    if args.json:
        common.print_json(rows if args.from_jsonl is not None else rows[0])
    else:
        for row in rows:
            print(row["dispatch_id"])
    return common.EXIT_OK


def _read_content(path: Path) -> str:
    try:
        data = bounded_files.read_at_most(path, tool_registry.MAX_CONTENT_BYTES)
    except bounded_files.TooLarge as exc:
        raise errors.InvalidInput(f"{path}: content is {exc}") from None
    except OSError as exc:
        raise errors.InvalidInput(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.InvalidInput(f"{path}: content must be UTF-8 text") from None


async def cmd_submit_tool(settings: Settings, args: argparse.Namespace) -> int:
    """Create the waiting StepRun, plan and approval, approve and consume: one transaction.

    Everything that can be refused without the store is refused first (identifiers, content
    size and encoding, the sandbox directory), so a refusal writes nothing at all.
    """
    plans.require_identifier("project", args.project)
    plans.require_identifier("run", args.run)
    content = await anyio.to_thread.run_sync(_read_content, args.content_file)
    submitting.tool_invoke_plan(
        project_id=args.project,
        run_id=args.run,
        step_run_id=ids.new_step_run_id(),
        tool_id=args.tool,
        content=content,
    )
    traceparent = traces.optional_traceparent(args.traceparent)
    await anyio.to_thread.run_sync(sandbox.root, settings.tool_sandbox_dir)
    store = await common.open_store(settings)
    try:
        submitted = await submitting.submit_tool_invocation(
            store,
            tool_invoke_tables.Repository(store),
            clock.SystemClock(),
            bootstrap.policy(settings),
            project_id=args.project,
            run_id=args.run,
            tool_id=args.tool,
            content=content,
            requested_by=args.requested_by,
            approved_by=args.approved_by,
            traceparent=traceparent,
        )
    except (errors.SelfApprovalRefused, errors.ApprovalNotPermitted) as exc:
        raise _as_steps(exc) from None
    finally:
        await store.close()
    consumed = submitted.consumed
    if args.json:
        common.print_json(
            {
                "dispatch_id": consumed.dispatch_id,
                "approval_request_id": consumed.approval_request_id,
                "action_ref": consumed.action_ref,
                "step_run_id": submitted.step_run_id,
                "run_id": args.run,
            }
        )
    else:
        print(consumed.dispatch_id)
    return common.EXIT_OK


async def cmd_approval(settings: Settings, args: argparse.Namespace) -> int:
    """Create, approve, reject or consume one approval request."""
    store = await common.open_store(settings)
    the_clock, the_policy = clock.SystemClock(), bootstrap.policy(settings)
    try:
        if args.approval_command == "create":
            # The plan cap itself: canonical.loads refuses a larger input anyway.
            data = _read_file(args.plan, canonical.PLAN_MAX_BYTES)
            if args.action == TOOL_INVOKE:
                # A bad plan is still named as such; a good one needs its StepRun created with
                # the approval, in one transaction, which only `submit tool-invoke` does.
                requesting.parse_plan(args.action, data)
                raise common.UsageError(
                    "approval create --action tool.invoke: a tool step needs its StepRun; "
                    "use `submit tool-invoke --project P --run RUN_ID --tool T --content-file F`"
                )
            plan = requesting.parse_plan(args.action, data, installed=bootstrap.action_plan_models)
            approval = await requesting.request_approval(
                store,
                the_clock,
                the_policy,
                plan,
                requested_by=args.requested_by,
                traceparent=traces.optional_traceparent(args.traceparent),
                narrowing=_narrowing(args),
            )
            out: dict[str, object] = {
                "approval_request_id": approval.approval_request_id,
                "status": approval.status.value,
                "action_ref": approval.action_ref,
            }
        elif args.approval_command == "approve":
            request_ids = _approval_ids(args)
            if len(request_ids) == 1 and args.from_file is None:
                approval = await approving.approve(
                    store, the_clock, request_ids[0], decided_by=args.by, comment=args.comment
                )
                out = {
                    "approval_request_id": approval.approval_request_id,
                    "status": approval.status.value,
                }
            else:
                approved = await approving.approve_many(
                    store, the_clock, request_ids, decided_by=args.by, comment=args.comment
                )
                out = {
                    "approvals": [
                        {"approval_request_id": a.approval_request_id, "status": a.status.value}
                        for a in approved
                    ]
                }
        elif args.approval_command == "reject":
            approval = await rejecting.reject(
                store, the_clock, args.approval_request_id, decided_by=args.by, comment=args.comment
            )
            out = {
                "approval_request_id": approval.approval_request_id,
                "status": approval.status.value,
            }
        else:
            consumed = await consuming.consume(
                store, the_clock, the_policy, args.approval_request_id
            )
            out = {
                "dispatch_id": consumed.dispatch_id,
                "approval_request_id": consumed.approval_request_id,
                "action_ref": consumed.action_ref,
            }
    finally:
        await store.close()
    if args.json:
        common.print_json(out)
    elif isinstance(listed := out.get("approvals"), list):
        for item in listed:
            print(item["approval_request_id"])
    else:
        print(out.get("dispatch_id") or out["approval_request_id"])
    return common.EXIT_OK


def _narrowing(args: argparse.Namespace) -> waits.Narrowing | None:
    """`--not-before T --window-for D`, checked on this clock; None without either."""
    if args.not_before is None and args.window_for is None:
        return None
    try:
        return waits.narrowing(
            args.not_before,
            args.window_for,
            now_ms=clock.SystemClock().now_ms(),
            names=("not-before", "window-for"),
        )
    except errors.WindowEmpty:
        raise
    except errors.InvalidInput as exc:
        raise common.UsageError(f"argument --{exc}") from exc


def _approval_ids(args: argparse.Namespace) -> list[str]:
    """The ids of `approval approve`: its arguments, then the file's lines (blank lines and
    `#` comments skipped); none, or one twice, is a usage error."""
    found = list(args.approval_request_ids)
    if args.from_file is not None:
        data = _read_file(args.from_file, bounded_files.APPROVAL_IDS_MAX_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise errors.InvalidInput(f"{args.from_file}: not UTF-8 text") from None
        for line in text.splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry:
                found.append(entry)
    if not found:
        raise common.UsageError("approval approve: give the request ids, or --from-file FILE")
    seen: set[str] = set()
    for approval_request_id in found:
        if approval_request_id in seen:
            raise common.UsageError(f"approval approve: {approval_request_id} is listed twice")
        seen.add(approval_request_id)
    return found
