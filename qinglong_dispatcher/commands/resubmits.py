"""`dispatch resubmit ID`: request a failed, blocked or cancelled dispatch (or an expired
request) again, as a new pending approval request for the same plan under a new action ref.

A verb of `dispatch` beside `cancel`, not a `submit` option: it starts from a dispatch id,
not from a plan, and writes only a request (a new approval is always needed). The login reads
the plan and writes the request: on PostgreSQL a submitter's login may not read plans, so it
is refused here before anything is written, and re-submits through the API or the UI, where
the daemon reads the plan for it.
"""

from __future__ import annotations

import argparse

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.bootstrap import tools
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.usecases import resubmitting


async def cmd_resubmit(settings: Settings, args: argparse.Namespace) -> int:
    """`dispatch resubmit ID [--requested-by W] [--json]`."""
    requested_by: str = args.requested_by or tools.os_user()
    the_policy = bootstrap.policy(settings)
    store = await common.open_store(settings)
    try:
        try:
            done = await resubmitting.resubmit(
                store,
                store,
                clock.SystemClock(),
                the_policy,
                args.dispatch_id,
                requested_by=requested_by,
                installed=bootstrap.action_plan_models,
            )
        except errors.StoreError as exc:
            if exc.code != "permission_denied":
                raise
            raise errors.ResubmitRefused(
                "this login may not read or request plans (a submitter's may not read them: "
                "request it again through the API or the UI); nothing was written"
            ) from None
    finally:
        await store.close()
    approval = done.approval
    if args.json:
        common.print_json(
            {
                "approval_request_id": approval.approval_request_id,
                "action_ref": approval.action_ref,
                "status": approval.status.value,
                "resubmitted_from": done.source.origin,
            }
        )
    else:
        print(f"{approval.approval_request_id} pending (action ref {approval.action_ref})")
    return common.EXIT_OK


def add_arguments(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], shared: argparse.ArgumentParser
) -> None:
    """`dispatch resubmit` and its options."""
    d = sub.add_parser(
        "resubmit",
        parents=[shared],
        help="request a failed, blocked or cancelled dispatch (or an expired request) again: "
        "a new pending approval request for the same plan under a new action ref",
    )
    d.add_argument("dispatch_id", metavar="ID", help="a dispatch id, or an expired request's id")
    d.add_argument("--requested-by", metavar="W", help="requester label (default the OS user)")
    d.add_argument("--json", action="store_true", help="print the new request as one JSON line")
