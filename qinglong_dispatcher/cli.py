"""The `qinglong-dispatcher` command line: one clear line and an exit code on every error."""

from __future__ import annotations

import argparse
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
# pydantic, structlog and anyio are imported by `build_parser` and `main`, on use.

PROG = "qinglong-dispatcher"

COMMANDS = {
    "migrate": "apply pending migrations (or verify with --check)",
    "run": "run the dispatcher daemon until SIGTERM/SIGINT",
    "tick": "run one batch (--once) or until nothing is due (--drain)",
    "status": "counts per execution status, due backlog, runs",
    "submit": "create, approve and consume actions in one step",
    "approval": (
        "create, approve, vote on, reject, consume or show a request, or list those waiting"
    ),
    "dispatch": (
        "list dispatches (newest first), show, cancel, request one again or lift a freeze for one"
    ),
    "recovery": "list or settle recovery_required executions",
    "bench": "measure throughput, latency, cost per dispatch and idle footprint",
    "prune": "delete finished dispatch trees and old audit records (retention)",
    "keys": "the plan key ring: generate, rotate stored plans, check they open",
    "backup": "copy the live edge database to a new file, beside the daemon",
    "token": "API tokens: create (prints the secret once), list, revoke",
    "policy": "approval policies: set (a new version), list, show, delete (retire)",
    "freeze": "change freezes: add (hold a scope's dispatches), list, end",
    "audit": "export the audit records and ledger lines (JSON lines, CEF or syslog)",
    "notify": "webhook subscriptions to the notification outbox: add, list, test, remove",
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


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    from qinglong_dispatcher.commands import (
        approval_arguments,
        audit,
        backup,
        bench,
        dispatches,
        freeze_arguments,
        keys,
        notify_arguments,
        parsing,
        policy_arguments,
        prune,
        recovery_arguments,
        tokens,
    )

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
    p.set_defaults(handler=parsing.lazy("admin", "cmd_migrate"))

    p = command("run")
    p.set_defaults(handler=parsing.lazy("dispatching", "cmd_run"))

    p = command("tick")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="one batch")
    mode.add_argument("--drain", action="store_true", help="batches until nothing is due")
    p.add_argument("--max-pages", type=parsing.positive_int, default=1_000_000, metavar="N")
    p.add_argument("--json", action="store_true", help="print the report as one JSON line")
    p.set_defaults(handler=parsing.lazy("dispatching", "cmd_tick"))

    p = command("status")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=parsing.lazy("admin", "cmd_status"))

    p = command("submit")
    approval_arguments.add_submit_arguments(p, shared)

    p = command("approval")
    approval_arguments.add_approval_arguments(p, shared)

    p = command("dispatch")
    dispatches.add_arguments(p, shared)
    p.set_defaults(handler=parsing.lazy("dispatches", "cmd_dispatch"))

    p = command("recovery")
    recovery_arguments.add_arguments(p, shared)

    p = command("bench")
    bench.add_arguments(p)
    p.set_defaults(handler=parsing.lazy("bench", "cmd_bench"))

    p = command("prune")
    prune.add_arguments(p)
    p.set_defaults(handler=parsing.lazy("prune", "cmd_prune"))

    p = command("keys")
    keys.add_arguments(p, shared)
    p.set_defaults(handler=parsing.lazy("keys", "cmd_keys"))

    p = command("backup")
    backup.add_arguments(p)
    p.set_defaults(handler=parsing.lazy("backup", "cmd_backup"))

    p = command("token")
    tokens.add_arguments(p, shared)
    p.set_defaults(handler=parsing.lazy("tokens", "cmd_token"))

    p = command("policy")
    policy_arguments.add_arguments(p, shared)

    p = command("freeze")
    freeze_arguments.add_arguments(p, shared)

    p = command("audit")
    audit.add_arguments(p, shared)
    p.set_defaults(handler=parsing.lazy("audit", "cmd_audit"))

    p = command("notify")
    notify_arguments.add_arguments(p, shared)

    p = command("health")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=parsing.lazy("admin", "cmd_health"))
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
            from qinglong_dispatcher.commands import tracing

            log_setup.configure(
                log_format=settings.log_format, level=settings.log_level, tracer=tracing.start()
            )
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
