"""The `submit` and `approval` commands' arguments: built without importing their handlers,
which `parsing.lazy` loads when a step runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from qinglong_dispatcher.commands import moments, parsing
from qinglong_dispatcher.domain import approval_views


def add_submit_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`submit run-create|tool-invoke`: create, approve and consume in one step."""
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
    _traceparent_argument(s)
    window_arguments(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=parsing.lazy("submitting", "cmd_submit"))
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
    _traceparent_argument(t)
    t.add_argument("--json", action="store_true")
    t.set_defaults(handler=parsing.lazy("submitting", "cmd_submit_tool"))


def add_approval_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`approval create|approve|vote|reject|consume|show|list`."""
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
    _traceparent_argument(a)
    window_arguments(a)
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
    _comment_argument(a)
    a.add_argument("--json", action="store_true")
    a = approval_sub.add_parser(
        "vote",
        parents=[shared],
        help="vote on a pending request under its policy: approve or deny, once per principal",
    )
    a.add_argument("approval_request_id", metavar="ID")
    choice = a.add_mutually_exclusive_group(required=True)
    choice.add_argument("--approve", dest="vote", action="store_const", const="approve")
    choice.add_argument("--deny", dest="vote", action="store_const", const="deny")
    a.add_argument("--reason", metavar="TEXT", help="why (a policy may require one)")
    a.add_argument(
        "--by", metavar="W", help="the decider recorded if this vote decides (the principal)"
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(handler=parsing.lazy("voting", "cmd_approval_vote"))
    a = approval_sub.add_parser(
        "reject", parents=[shared], help="cancel a pending request: it is never dispatched"
    )
    a.add_argument("approval_request_id", metavar="ID")
    a.add_argument("--by", required=True, metavar="W")
    _comment_argument(a)
    a.add_argument("--json", action="store_true")
    for step, summary in (
        ("consume", "consume an approved request into its dispatch"),
        ("show", "one request and its status: pending, approved, consumed, rejected or expired"),
    ):
        a = approval_sub.add_parser(step, parents=[shared], help=summary)
        a.add_argument("approval_request_id", metavar="ID")
        a.add_argument("--json", action="store_true")
    a.set_defaults(handler=parsing.lazy("previews", "cmd_approval_show"))  # `show`, the last
    p.set_defaults(handler=parsing.lazy("submitting", "cmd_approval"))
    a = approval_sub.add_parser(
        "list",
        parents=[shared],
        help="requests newest first (waiting ones unless --status), plans as redacted previews",
    )
    a.add_argument(
        "--status",
        default=approval_views.WAITING,
        choices=approval_views.STATUSES,
        help="pending: waiting (the default); a decided status shows who decided, how and when",
    )
    a.add_argument("--action", metavar="TYPE", help="action type (built in or installed)")
    a.set_defaults(action_option=True)
    a.add_argument("--project", metavar="P", help="project id")
    moments.add_range_arguments(a, "requests")
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
        help=f"the page after this {approval_views.CURSOR_FORMAT} (`next` of the last page; "
        "a position in the order of all requests, so good under any --status)",
    )
    a.add_argument("--json", action="store_true")
    a.set_defaults(handler=parsing.lazy("previews", "cmd_approval_list"))


def _comment_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--comment",
        metavar="TEXT",
        help="why, in one printable line of at most 500 characters (audited with the decision)",
    )


def _traceparent_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traceparent",
        metavar="TP",
        help="W3C trace context the dispatch joins (00-<trace id>-<span id>-<flags>)",
    )


def window_arguments(p: argparse.ArgumentParser) -> None:
    """`--not-before T --window-for D`: the requester's narrowing of the policy's window."""
    p.add_argument(
        "--not-before",
        metavar="T",
        help="start no earlier than T: ISO 8601 with a zone, or a DURATION from now (4h)",
    )
    p.add_argument(
        "--window-for",
        metavar="D",
        help="start within D of --not-before (of the approval without it), or not at all; "
        "the policy's window still bounds both",
    )
