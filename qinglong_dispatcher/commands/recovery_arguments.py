"""The `recovery` command's arguments: `list`, and the audited `resolve`."""

from __future__ import annotations

import argparse

from qinglong_dispatcher.commands import parsing
from qinglong_dispatcher.domain import states


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`recovery list|resolve`."""
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
    r.add_argument(
        "--comment",
        metavar="TEXT",
        help="why, in one printable line of at most 500 characters (audited with the settle)",
    )
    r.add_argument("--json", action="store_true", help="print the result as one JSON line")
    p.set_defaults(handler=parsing.lazy("recovery", "cmd_recovery"))
