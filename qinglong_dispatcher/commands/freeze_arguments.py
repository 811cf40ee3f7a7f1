"""The `freeze` command's arguments: built without importing its handler, which
`parsing.lazy` loads when a step runs."""

from __future__ import annotations

import argparse

from qinglong_dispatcher.commands import parsing


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`freeze add|list|end`: change freezes, written by the schema's owner."""
    sub = p.add_subparsers(dest="freeze_command", metavar="STEP", required=True)
    a = sub.add_parser(
        "add", parents=[shared], help="freeze the dispatches of a scope (all by default)"
    )
    a.add_argument(
        "--until", required=True, metavar="T", help="end, ISO 8601 with a zone (or a DURATION)"
    )
    a.add_argument("--from", dest="from_", metavar="T", help="start, ISO 8601 (default: now)")
    a.add_argument("--action", metavar="TYPE", help="only this action type")
    a.add_argument("--project", metavar="P", help="only this project")
    a.add_argument("--target-prefix", metavar="T", help="only targets that begin with T")
    a.add_argument("--reason", required=True, metavar="R", help="why (1…200 characters)")
    a.add_argument("--json", action="store_true")
    listing = sub.add_parser(
        "list", parents=[shared], help="the freezes in force or to come, newest first"
    )
    listing.add_argument("--all", action="store_true", help="the ended and past ones too")
    listing.add_argument("--json", action="store_true")
    end = sub.add_parser("end", parents=[shared], help="end a freeze now (audited)")
    end.add_argument("freeze_id", metavar="ID", type=parsing.positive_int)
    end.add_argument("--json", action="store_true")
    p.set_defaults(handler=parsing.lazy("freezes", "cmd_freeze"))
