"""The `qinglong-dispatcher` command line: one clear line and an exit code on every error."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from qinglong_dispatcher import __version__
from qinglong_dispatcher.commands import startup

if TYPE_CHECKING:
    from qinglong_dispatcher.config.settings import Settings
    from qinglong_dispatcher.domain import errors

    Handler = Callable[[Settings, argparse.Namespace], Awaitable[int]]

# `--version` and `--help` import nothing more than this module: the commands, the drivers,
# pydantic, structlog and anyio are imported by `build_subcommands` and `main`, on use.

PROG = "qinglong-dispatcher"

COMMANDS = {
    "migrate": "apply pending migrations (or verify with --check)",
    "run": "run the dispatcher daemon until SIGTERM/SIGINT",
    "tick": "run one batch (--once) or until nothing is due (--drain)",
    "status": "counts per execution status, due backlog, runs",
    "submit": "create, approve and consume actions in one step",
    "approval": "create, approve, reject, consume or show a request, or list those waiting",
    "dispatch": "list dispatches (newest first), show one, or cancel one waiting",
    "recovery": "list or settle recovery_required executions",
    "bench": "measure throughput, latency, cost per dispatch and idle footprint",
    "prune": "delete finished dispatch trees and old audit records (retention)",
    "keys": "the plan key ring: generate, rotate stored plans, check they open",
    "backup": "copy the live edge database to a new file, beside the daemon",
    "token": "API tokens: create (prints the secret once), list, revoke",
    "health": "exit 0 when the store is reachable and migrated",
}
"""Every command and its one-line help, in the order `--help` lists them."""
EXIT_SOFTWARE = 70
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT), as a shell reports a process it ended: 128 + 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        from qinglong_dispatcher.commands import common

        raise common.UsageError(message)


def _positive_int(text: str) -> int:
    """An integer ≥ 1 (`tick --max-pages 0` would claim nothing and report success)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def _require_known_action(args: argparse.Namespace) -> None:
    """`--action` names a built-in or installed type; the entry points are read (once, after
    logging is set up: loading logs `actions.loaded`) only for another name."""
    action = getattr(args, "action", None) if getattr(args, "action_option", False) else None
    if action is None:
        return
    from qinglong_dispatcher.actions import registry
    from qinglong_dispatcher.commands import common
    from qinglong_dispatcher.domain import plans

    if action in registry.BUILT_IN or action in registry.installed().specs:
        return
    shown = action if plans.is_identifier(action) else "?"
    raise common.UsageError(f"argument --action: unknown action type: {shown}")


def exit_code_for(exc: errors.QinglongError) -> int:
    """The exit code of a typed error (docs/cli.md)."""
    from qinglong_dispatcher.commands import common
    from qinglong_dispatcher.domain import errors

    if isinstance(exc, errors.ConfigurationError):
        return common.EXIT_CONFIG
    if isinstance(exc, errors.StoreUnavailable | errors.StoreCorrupted):
        return common.EXIT_UNAVAILABLE
    if isinstance(exc, errors.InvalidInput):
        return common.EXIT_USAGE
    return common.EXIT_REFUSED


# -- parser ------------------------------------------------------------------------------


def _shared_options() -> _Parser:
    """Global options, accepted before and after the command."""
    shared = _Parser(add_help=False)
    shared.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="TOML file of settings (overridden by QINGLONG_* variables)",
    )
    shared.add_argument(
        "--profile",
        default=argparse.SUPPRESS,
        metavar="edge|cluster",
        help="deployment profile (env QINGLONG_PROFILE; default edge)",
    )
    shared.add_argument(
        "--database",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="sqlite:///relative.db, sqlite:////abs/path.db or postgresql://… "
        "(env QINGLONG_DATABASE_URL)",
    )
    return shared


def _top_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The program and its commands without their arguments: all `--version` and `--help`
    need, built without importing the commands."""
    shared = _shared_options()
    parser = _Parser(
        prog=PROG,
        parents=[shared],
        description="Executes approved actions durably, and never twice by accident.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands: dict[str, argparse.ArgumentParser] = {
        name: sub.add_parser(name, parents=[shared], help=text, description=text)
        for name, text in COMMANDS.items()
    }
    return parser, commands


def _lazy(module: str, name: str) -> Handler:
    """The handler `name` of `commands.<module>`, imported when the command runs: a read
    command never loads the daemon, the actions or the bench."""

    async def handler(settings: Settings, args: argparse.Namespace) -> int:
        found: Handler = getattr(
            importlib.import_module(f"qinglong_dispatcher.commands.{module}"), name
        )
        return await found(settings, args)

    # Named as the function it stands for: logs, tracebacks and tests see which command it is.
    handler.__module__ = f"qinglong_dispatcher.commands.{module}"
    handler.__qualname__ = handler.__name__ = name
    return handler


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    from qinglong_dispatcher.commands import backup, bench, dispatches, keys, prune, tokens
    from qinglong_dispatcher.domain import approval_views, states

    parser, commands = _top_parser()
    shared = _shared_options()
    command = commands.__getitem__

    p = command("migrate")
    p.add_argument("--check", action="store_true", help="only verify; exit 1 if pending/tampered")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.add_argument(
        "--move-to",
        metavar="INSTALLATION",
        help="cluster: give this migrated database the roles of installation INSTALLATION "
        "(<INSTALLATION>_runtime, …) instead of the ones it shares (docs/security.md)",
    )
    p.set_defaults(handler=_lazy("admin", "cmd_migrate"))

    p = command("run")
    p.set_defaults(handler=_lazy("dispatching", "cmd_run"))

    p = command("tick")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one batch")
    mode.add_argument("--drain", action="store_true", help="batches until nothing is due")
    p.add_argument("--max-pages", type=_positive_int, default=1_000_000, metavar="N")
    p.add_argument("--json", action="store_true", help="print the report as one JSON line")
    p.set_defaults(handler=_lazy("dispatching", "cmd_tick"))

    p = command("status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_lazy("admin", "cmd_status"))

    p = command("submit")
    submit_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s: argparse.ArgumentParser = submit_sub.add_parser(
        "run-create", parents=[shared], help="submit run.create actions"
    )
    s.add_argument("--project", metavar="P", help="project id")
    s.add_argument("--task", metavar="T", help="task id")
    s.add_argument("--revision", type=int, metavar="N", help="task revision (integer ≥ 0)")
    s.add_argument("--executor", metavar="E", help="executor type (shell)")
    s.add_argument("--priority", type=int, metavar="N", help="-1000…1000 (0)")
    s.add_argument("--task-name", metavar="S", help="optional low-sensitivity task name")
    s.add_argument("--requested-by", default="cli", metavar="W", help="requester (cli)")
    s.add_argument("--approved-by", default="cli", metavar="W", help="approver (cli)")
    s.add_argument("--from-jsonl", type=Path, metavar="FILE", help="one plan object per line")
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=_lazy("submitting", "cmd_submit"))
    t: argparse.ArgumentParser = submit_sub.add_parser(
        "tool-invoke",
        parents=[shared],
        help="submit a tool.invoke step (a StepRun waiting for its approval, then approved)",
    )
    t.add_argument("--project", required=True, metavar="P", help="project id")
    t.add_argument("--run", required=True, metavar="RUN_ID", help="a queued or running Run")
    t.add_argument(
        "--tool", required=True, metavar="TOOL", help="reviewed built-in tool (builtin.file.write)"
    )
    t.add_argument(
        "--content-file", required=True, type=Path, metavar="F", help="UTF-8 content, ≤ 32 KiB"
    )
    t.add_argument("--requested-by", default="cli", metavar="W", help="requester (cli)")
    t.add_argument("--approved-by", default="cli", metavar="W", help="approver (cli)")
    t.add_argument("--json", action="store_true")
    t.set_defaults(handler=_lazy("submitting", "cmd_submit_tool"))

    p = command("approval")
    approval_sub = p.add_subparsers(dest="approval_command", metavar="STEP", required=True)
    a: argparse.ArgumentParser = approval_sub.add_parser(
        "create", parents=[shared], help="request approval of one action's plan (pending)"
    )
    a.add_argument(
        "--action",
        required=True,
        metavar="TYPE",
        help="a built-in action type (docs/actions.md) or an installed action's",
    )
    a.set_defaults(action_option=True)
    a.add_argument("--plan", required=True, type=Path, metavar="FILE")
    a.add_argument("--requested-by", required=True, metavar="W")
    a.add_argument("--json", action="store_true")
    a = approval_sub.add_parser(
        "approve",
        parents=[shared],
        help="approve pending requests (another principal), all in one transaction",
    )
    a.add_argument("approval_request_ids", nargs="*", metavar="ID")
    a.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="more ids, one per line (blank lines and # comments ignored)",
    )
    a.add_argument("--by", required=True, metavar="W")
    a.add_argument("--json", action="store_true")
    a = approval_sub.add_parser(
        "reject", parents=[shared], help="cancel a pending request: it is never dispatched"
    )
    a.add_argument("approval_request_id", metavar="ID")
    a.add_argument("--by", required=True, metavar="W")
    a.add_argument("--json", action="store_true")
    for step, summary in (
        ("consume", "consume an approved request into its dispatch"),
        ("show", "one request and its status: pending, approved, consumed, rejected or expired"),
    ):
        a = approval_sub.add_parser(step, parents=[shared], help=summary)
        a.add_argument("approval_request_id", metavar="ID")
        a.add_argument("--json", action="store_true")
    a.set_defaults(handler=_lazy("previews", "cmd_approval_show"))  # `show`, the last
    p.set_defaults(handler=_lazy("submitting", "cmd_approval"))
    a = approval_sub.add_parser(
        "list", parents=[shared], help="waiting requests newest first, plans as redacted previews"
    )
    a.add_argument("--action", metavar="TYPE", help="action type (built in or installed)")
    a.set_defaults(action_option=True)
    a.add_argument("--project", metavar="P", help="project id")
    a.add_argument(
        "--limit",
        type=int,
        default=approval_views.DEFAULT_LIMIT,
        metavar="N",
        help=f"rows per page, 1…{approval_views.MAX_LIMIT} ({approval_views.DEFAULT_LIMIT})",
    )
    a.add_argument(
        "--after",
        metavar="CURSOR",
        help=f"the page after this {approval_views.CURSOR_FORMAT} (`next` of the last page)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(handler=_lazy("previews", "cmd_approval_list"))

    p = command("dispatch")
    dispatches.add_arguments(p, shared)
    p.set_defaults(handler=_lazy("dispatches", "cmd_dispatch"))

    p = command("recovery")
    recovery_sub = p.add_subparsers(dest="recovery_command", metavar="STEP", required=True)
    r: argparse.ArgumentParser = recovery_sub.add_parser(
        "list", parents=[shared], help="executions whose lease expired after the barrier"
    )
    r.add_argument("--json", action="store_true")
    r = recovery_sub.add_parser(
        "resolve", parents=[shared], help="settle one execution as an authenticated operator"
    )
    r.add_argument("dispatch_id", metavar="DISPATCH_ID")
    r.add_argument(
        "--as", dest="resolution", required=True, choices=[c.value for c in states.Completion]
    )
    r.add_argument("--operator", required=True, metavar="W", help="operator name (audited)")
    r.add_argument("--reason", required=True, metavar="CODE", help="low-sensitivity reason code")
    r.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.set_defaults(handler=_lazy("recovery", "cmd_recovery"))

    p = command("bench")
    bench.add_arguments(p)
    p.set_defaults(handler=_lazy("bench", "cmd_bench"))

    p = command("prune")
    prune.add_arguments(p)
    p.set_defaults(handler=_lazy("prune", "cmd_prune"))

    p = command("keys")
    keys.add_arguments(p, shared)
    p.set_defaults(handler=_lazy("keys", "cmd_keys"))

    p = command("backup")
    backup.add_arguments(p)
    p.set_defaults(handler=_lazy("backup", "cmd_backup"))

    p = command("token")
    tokens.add_arguments(p, shared)
    p.set_defaults(handler=_lazy("tokens", "cmd_token"))

    p = command("health")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_lazy("admin", "cmd_health"))
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    from qinglong_dispatcher.config.settings import load_settings

    return load_settings(
        profile=getattr(args, "profile", None),
        config_file=getattr(args, "config", None),
        database_url=getattr(args, "database", None),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, load settings, run the command; map every typed error to one line and a code.

    Ctrl-C at any point ends with status 130 and no traceback. Until the command runs (the
    imports of pydantic, anyio and the commands, parsing, settings: a few hundred
    milliseconds) it is only noted, and answered once that work is done
    (`commands.startup.held_interrupts`).
    """
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    if given in (["--version"], ["-h"], ["--help"]):
        _top_parser()[0].parse_args(given)  # prints, then exits 0
    with startup.held_interrupts():
        import anyio

        from qinglong_dispatcher.commands import common
        from qinglong_dispatcher.domain import errors
        from qinglong_dispatcher.lifecycle import logging as log_setup

    try:
        with startup.held_interrupts():
            parser = build_parser()
            try:
                args = parser.parse_args(given)
            except common.UsageError:
                if unknown := startup.unknown_global_option(given):
                    raise common.UsageError(unknown) from None
                raise
            settings = _settings(args)
            log_setup.configure(log_format=settings.log_format, level=settings.log_level)
            _require_known_action(args)
        handler: Handler = args.handler
        return anyio.run(handler, settings, args)
    except common.UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return common.EXIT_USAGE
    except errors.QinglongError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: one line for the user, never a traceback or a secret
        print(f"{PROG}: internal error ({exc.__class__.__name__})", file=sys.stderr)
        return EXIT_SOFTWARE
