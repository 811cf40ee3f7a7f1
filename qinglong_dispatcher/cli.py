"""The `qinglong-dispatcher` command line: one clear line and an exit code on every error."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import anyio

from qinglong_dispatcher import __version__, bootstrap, clock, ports
from qinglong_dispatcher.domain import errors, plans
from qinglong_dispatcher.lifecycle import daemon
from qinglong_dispatcher.lifecycle import logging as log_setup
from qinglong_dispatcher.settings import Settings, load_settings

PROG = "qinglong-dispatcher"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_CONFIG = 0, 1, 2, 69, 78


class UsageError(Exception):
    """Bad command-line usage, reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def exit_code_for(exc: errors.QinglongError) -> int:
    """The exit code of a typed error (DESIGN.md §8)."""
    if isinstance(exc, errors.ConfigurationError):
        return EXIT_CONFIG
    if isinstance(exc, errors.StoreUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, errors.InvalidInput):
        return EXIT_USAGE
    return EXIT_REFUSED


def _print_json(value: object) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


# -- commands ----------------------------------------------------------------------------


async def _open(settings: Settings, *, require_current: bool = True) -> ports.Store:
    store = await bootstrap.open_store(settings)
    if require_current:
        try:
            (await store.schema_state()).require_current()
        except BaseException:
            await store.close()
            raise
    return store


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Apply pending migrations, or only verify them with --check."""
    store = await _open(settings, require_current=False)
    try:
        if args.check:
            state = await store.schema_state()
            if not state.current:
                try:
                    state.require_current()
                except errors.SchemaError as exc:
                    print(f"{PROG}: {exc}", file=sys.stderr)
                return EXIT_REFUSED
            print("schema is current")
            return EXIT_OK
        applied = await store.migrate(now_ms=clock.SystemClock().now_ms())
        print(f"applied {len(applied)} migration(s)" if applied else "schema is current")
        return EXIT_OK
    finally:
        await store.close()


async def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    """The daemon until SIGTERM/SIGINT."""
    store = await _open(settings)
    try:
        await store.check_durability()
        the_clock = clock.SystemClock()
        return await daemon.run(
            settings, store, bootstrap.build_dispatcher(settings, store, the_clock)
        )
    finally:
        await store.close()


async def cmd_tick(settings: Settings, args: argparse.Namespace) -> int:
    """One batch, or batches until nothing is due."""
    store = await _open(settings)
    try:
        await store.check_durability()
        the_dispatcher = bootstrap.build_dispatcher(settings, store, clock.SystemClock())
        totals: dict[str, int] = {}
        observed = batches = 0
        max_pages = args.max_pages if args.drain else 1
        while batches < max_pages:
            report = await the_dispatcher.dispatch_batch()
            batches += 1
            observed += report.observed
            for key, n in report.outcomes.items():
                totals[key] = totals.get(key, 0) + n
            if report.observed == 0 or not args.drain:
                break
        result = {
            "batches": batches,
            "observed": observed,
            "outcomes": dict(sorted(totals.items())),
        }
        if args.json:
            _print_json(result)
        else:
            summary = ", ".join(f"{k}={v}" for k, v in sorted(totals.items())) or "nothing due"
            print(f"{batches} batch(es), {observed} observed: {summary}")
        return EXIT_OK
    finally:
        await store.close()


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    """Counts per effective status, due backlog, oldest due age, Runs."""
    store = await _open(settings)
    try:
        counts = await store.counts(now_ms=clock.SystemClock().now_ms())
    finally:
        await store.close()
    age = None if counts.oldest_due_age_ms is None else counts.oldest_due_age_ms / 1000
    executions = {status.value: n for status, n in counts.executions.items()}
    result = {
        "profile": settings.profile,
        "executions": executions,
        "due": counts.due,
        "oldest_due_age_seconds": age,
        "runs": counts.runs,
    }
    if args.json:
        _print_json(result)
    else:
        for status, n in executions.items():
            print(f"{status:<18} {n}")
        print(f"{'due':<18} {counts.due}")
        print(f"{'oldest due age':<18} {'-' if age is None else f'{age:.1f}s'}")
        print(f"{'runs':<18} {counts.runs}")
    return EXIT_OK


def _read_jsonl(path: Path) -> list[plans.ActionPlan]:
    from qinglong_dispatcher import api

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.InvalidInput(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    result: list[plans.ActionPlan] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            from qinglong_dispatcher.domain import canonical

            data = canonical.loads(line)
            if not isinstance(data, dict):
                raise errors.PlanInvalid("plan invalid: a line must be one JSON object")
            forbidden = {"schemaVersion", "actionRef"} & data.keys()
            if forbidden:
                raise errors.PlanInvalid(f"plan invalid: {sorted(forbidden)[0]}: filled by submit")
            result.append(api.run_create_plan(data))
        except errors.InvalidInput as exc:
            raise errors.InvalidInput(f"{path}:{number}: {exc}") from None
    if not result:
        raise errors.InvalidInput(f"{path}: no plans")
    return result


async def cmd_submit(settings: Settings, args: argparse.Namespace) -> int:
    """Create plan + approval, approve, consume; print the dispatch id(s)."""
    from qinglong_dispatcher import api

    if args.from_jsonl is not None:
        plan_list = _read_jsonl(args.from_jsonl)
    else:
        missing = [n for n in ("project", "task", "revision") if getattr(args, n) is None]
        if missing:
            raise UsageError(f"--{missing[0]} is required without --from-jsonl")
        fields: dict[str, object] = {
            "projectId": args.project,
            "taskId": args.task,
            "taskRevision": args.revision,
            "executorType": args.executor,
            "priority": args.priority,
        }
        if args.task_name is not None:
            fields["taskName"] = args.task_name
        plan_list = [api.run_create_plan(fields)]
    plans.require_identifier("requested-by", args.requested_by)
    plans.require_identifier("approved-by", args.approved_by)
    store = await _open(settings)
    try:
        the_api = bootstrap.build_api(settings, store, clock.SystemClock())
        consumed = await the_api.submit(
            plan_list, requested_by=args.requested_by, approved_by=args.approved_by
        )
    finally:
        await store.close()
    rows = [
        {
            "dispatch_id": c.dispatch_id,
            "approval_request_id": c.approval_request_id,
            "action_ref": c.action_ref,
        }
        for c in consumed
    ]
    if args.json:
        _print_json(rows if args.from_jsonl is not None else rows[0])
    else:
        for row in rows:
            print(row["dispatch_id"])
    return EXIT_OK


async def cmd_approval(settings: Settings, args: argparse.Namespace) -> int:
    """Create, approve or consume one approval request."""
    store = await _open(settings)
    try:
        the_api = bootstrap.build_api(settings, store, clock.SystemClock())
        if args.approval_command == "create":
            try:
                data = args.plan.read_bytes()
            except OSError as exc:
                raise errors.InvalidInput(
                    f"{args.plan}: cannot be read ({exc.__class__.__name__})"
                ) from None
            approval = await the_api.create_approval(
                args.action, data, requested_by=args.requested_by
            )
            out: dict[str, object] = {
                "approval_request_id": approval.approval_request_id,
                "status": approval.status.value,
                "action_ref": approval.action_ref,
            }
        elif args.approval_command == "approve":
            approval = await the_api.approve(args.approval_request_id, decided_by=args.by)
            out = {"approval_request_id": approval.approval_request_id, "status": "approved"}
        else:
            consumed = await the_api.consume(args.approval_request_id)
            out = {
                "dispatch_id": consumed.dispatch_id,
                "approval_request_id": consumed.approval_request_id,
                "action_ref": consumed.action_ref,
            }
    finally:
        await store.close()
    if args.json:
        _print_json(out)
    else:
        print(out.get("dispatch_id") or out["approval_request_id"])
    return EXIT_OK


async def cmd_health(settings: Settings, args: argparse.Namespace) -> int:
    """Exit 0 when the store is reachable and migrated."""
    ok, reason = True, "ok"
    try:
        store = await bootstrap.open_store(settings)
        try:
            (await store.schema_state()).require_current()
        finally:
            await store.close()
    except errors.StoreError as exc:
        ok, reason = False, exc.code
    if args.json:
        _print_json({"ok": ok, "reason": reason})
    else:
        print("ok" if ok else f"not ok: {reason}")
    return EXIT_OK if ok else EXIT_REFUSED


# -- parser ------------------------------------------------------------------------------


def _common() -> _Parser:
    """Global options, accepted before and after the command."""
    common = _Parser(add_help=False)
    common.add_argument("--config", type=Path, default=argparse.SUPPRESS, metavar="FILE")
    common.add_argument("--profile", default=argparse.SUPPRESS, metavar="edge|cluster")
    common.add_argument("--database", default=argparse.SUPPRESS, metavar="URL")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    common = _common()
    parser = _Parser(prog=PROG, parents=[common], description=__doc__)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name, parents=[common], help=help_text, description=help_text, **kw
        )
        return p

    p = command("migrate", "apply pending migrations (or verify with --check)")
    p.add_argument("--check", action="store_true", help="only verify; exit 1 if pending/tampered")
    p.set_defaults(handler=cmd_migrate)

    p = command("run", "run the dispatcher daemon until SIGTERM/SIGINT")
    p.set_defaults(handler=cmd_run)

    p = command("tick", "run one batch (--once) or until nothing is due (--drain)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one batch")
    mode.add_argument("--drain", action="store_true", help="batches until nothing is due")
    p.add_argument("--max-pages", type=int, default=1_000_000, metavar="N")
    p.add_argument("--json", action="store_true", help="print the report as one JSON line")
    p.set_defaults(handler=cmd_tick)

    p = command("status", "counts per execution status, due backlog, runs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_status)

    p = command("submit", "create, approve and consume actions in one step")
    submit_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s: argparse.ArgumentParser = submit_sub.add_parser(
        "run-create", parents=[common], help="submit run.create actions"
    )
    s.add_argument("--project", metavar="P")
    s.add_argument("--task", metavar="T")
    s.add_argument("--revision", type=int, metavar="N")
    s.add_argument("--executor", default="shell", metavar="E")
    s.add_argument("--priority", type=int, default=0, metavar="N")
    s.add_argument("--task-name", metavar="S")
    s.add_argument("--requested-by", default="cli", metavar="W")
    s.add_argument("--approved-by", default="cli", metavar="W")
    s.add_argument("--from-jsonl", type=Path, metavar="FILE", help="one plan object per line")
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=cmd_submit)

    p = command("approval", "create, approve or consume one approval request")
    approval_sub = p.add_subparsers(dest="approval_command", metavar="STEP", required=True)
    a: argparse.ArgumentParser = approval_sub.add_parser("create", parents=[common])
    a.add_argument("--action", required=True, choices=sorted(plans.PLAN_MODELS))
    a.add_argument("--plan", required=True, type=Path, metavar="FILE")
    a.add_argument("--requested-by", required=True, metavar="W")
    a.add_argument("--json", action="store_true")
    a = approval_sub.add_parser("approve", parents=[common])
    a.add_argument("approval_request_id", metavar="ID")
    a.add_argument("--by", required=True, metavar="W")
    a.add_argument("--json", action="store_true")
    a = approval_sub.add_parser("consume", parents=[common])
    a.add_argument("approval_request_id", metavar="ID")
    a.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_approval)

    p = command("health", "exit 0 when the store is reachable and migrated")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_health)
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        profile=getattr(args, "profile", None),
        config_file=getattr(args, "config", None),
        database_url=getattr(args, "database", None),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, load settings, run the command; map every typed error to one line and a code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        settings = _settings(args)
        log_setup.configure(log_format=settings.log_format, level=settings.log_level)
        handler: Callable[[Settings, argparse.Namespace], Awaitable[int]] = args.handler
        return anyio.run(handler, settings, args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except errors.QinglongError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return 130
