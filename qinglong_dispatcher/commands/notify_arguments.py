"""The `notify` command's arguments: built without importing its handler, which
`parsing.lazy` loads when a step runs."""

from __future__ import annotations

import argparse

from qinglong_dispatcher.commands import parsing


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`notify add|list|test|remove`: webhook subscriptions, written by the schema's owner."""
    sub = p.add_subparsers(dest="notify_command", metavar="STEP", required=True)
    add = sub.add_parser("add", parents=[shared], help="subscribe a webhook URL to events")
    add.add_argument("name", metavar="NAME", help="lower-case letters, digits, '.', '_', '-'")
    add.add_argument("--url", required=True, metavar="URL", help="http:// or https:// to POST to")
    add.add_argument(
        "--secret-ref",
        required=True,
        metavar="REF",
        help="the whsec_ signing secret by reference: credential:NAME, file:/PATH or env:NAME",
    )
    add.add_argument(
        "--kind",
        action="append",
        default=[],
        dest="kinds",
        metavar="K",
        help="an event kind to hear (repeat; default: every kind but dispatch.succeeded)",
    )
    add.add_argument("--action", metavar="TYPE", help="only this action type's events")
    add.add_argument("--project", metavar="P", help="only this project's events")
    add.add_argument(
        "--target-prefix",
        metavar="PREFIX",
        help="only events whose target begins with PREFIX (events without a target: not heard)",
    )
    add.add_argument(
        "--format",
        choices=("raw", "slack"),
        default="raw",
        help="raw: a CloudEvents envelope; slack: an incoming-webhook message (raw)",
    )
    add.add_argument("--json", action="store_true")
    listing = sub.add_parser("list", parents=[shared], help="every subscription, by name")
    listing.add_argument("--json", action="store_true")
    test = sub.add_parser(
        "test", parents=[shared], help="send a signed sample event to a subscription now"
    )
    test.add_argument("name", metavar="NAME")
    test.add_argument("--json", action="store_true")
    remove = sub.add_parser(
        "remove", parents=[shared], help="delete a subscription (its pending deliveries too)"
    )
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--json", action="store_true")
    p.set_defaults(handler=parsing.lazy("notify", "cmd_notify"))
