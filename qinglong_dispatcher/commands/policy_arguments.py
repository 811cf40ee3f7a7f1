"""The `policy` command's arguments: built without importing its handler, which
`parsing.lazy` loads when a step runs."""

from __future__ import annotations

import argparse

from qinglong_dispatcher.commands import parsing


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`policy set|list|show|delete`: approval policies, written by the schema's owner."""
    sub = p.add_subparsers(dest="policy_command", metavar="STEP", required=True)
    s = sub.add_parser(
        "set", parents=[shared], help="write the next version of a policy (the first, or a change)"
    )
    s.add_argument("name", metavar="NAME", help="lower-case letters, digits, '.', '_', '-'")
    s.add_argument("--action", required=True, metavar="TYPE", help="the action type it applies to")
    s.set_defaults(action_option=True)
    s.add_argument("--project", metavar="P", help="only this project's requests (default: any)")
    s.add_argument(
        "--target-prefix",
        metavar="T",
        help="only requests whose plan's target begins with T (a plain prefix, no wildcards; "
        "default: any target); the longest matching prefix wins",
    )
    s.add_argument(
        "--approvals", required=True, type=int, metavar="N", help="distinct approvals, 1…100"
    )
    s.add_argument(
        "--group",
        action="append",
        default=[],
        dest="groups",
        metavar="G",
        help="an approver group whose members may vote (repeat; none: any approver)",
    )
    s.add_argument(
        "--denials", type=int, default=1, metavar="N", help="denials that reject, 1…100 (1)"
    )
    s.add_argument("--reason-required", action="store_true", help="every vote must give a reason")
    s.add_argument(
        "--lifetime",
        metavar="DURATION",
        help="how long its requests live, like 90s, 30m, 4h, 2d, at most 30d "
        "(default: the approval lifetime setting)",
    )
    s.add_argument(
        "--remind-before",
        metavar="DURATION",
        help="write an approval.expiring event this long before a request expires",
    )
    s.add_argument(
        "--not-before-delay",
        metavar="DURATION",
        help="its dispatches may start only this long after they are approved and consumed "
        "(the execution window opens then; default: at once)",
    )
    s.add_argument(
        "--window",
        metavar="DURATION",
        help="its dispatches may start only within this long after the window opens; past it "
        "a waiting dispatch ends cancelled (window_expired), never late (default: no end)",
    )
    rule = s.add_mutually_exclusive_group()
    rule.add_argument(
        "--hold-on-unknown",
        dest="proceed_on_unknown",
        action="store_false",
        default=False,
        help="a target whose last effect's outcome is unknown (recovery_required) starts "
        "nothing else until that is settled (the default)",
    )
    rule.add_argument(
        "--proceed-on-unknown",
        dest="proceed_on_unknown",
        action="store_true",
        help="the next dispatch on such a target may start once it is recovery_required "
        "(never while its lease is live)",
    )
    s.add_argument("--json", action="store_true")
    listing = sub.add_parser("list", parents=[shared], help="the policies in force, by name")
    listing.add_argument("--all", action="store_true", help="the retired ones too")
    listing.add_argument("--json", action="store_true")
    show = sub.add_parser(
        "show", parents=[shared], help="a policy's version in force and every version written"
    )
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true")
    delete = sub.add_parser(
        "delete", parents=[shared], help="retire a policy: a new version, no longer in force"
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--json", action="store_true")
    p.set_defaults(handler=parsing.lazy("policies", "cmd_policy"))
