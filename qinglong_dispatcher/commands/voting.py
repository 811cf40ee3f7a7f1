"""`approval vote`: one principal's approve or deny on a request under its policy."""

from __future__ import annotations

import argparse

from qinglong_dispatcher import clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import approvals
from qinglong_dispatcher.usecases import voting


async def cmd_approval_vote(settings: Settings, args: argparse.Namespace) -> int:
    """Cast the vote; print the request as the votes left it.

    Every refusal (not a member of the policy's groups, the requester, a second vote, a
    decided or expired request, a missing reason) is the database's, raised as its typed
    error: one line, exit 1, nothing written."""
    choice = approvals.Vote(args.vote)
    store = await common.open_store(settings)
    try:
        approval = await voting.vote(
            store,
            clock.SystemClock(),
            args.approval_request_id,
            choice,
            reason=args.reason,
            decided_by=args.by,
        )
        tally = await voting.tally(store, approval.approval_request_id)
    finally:
        await store.close()
    out: dict[str, object] = {
        "approval_request_id": approval.approval_request_id,
        "status": approval.status.value,
        "vote": choice.value,
    }
    if tally is not None:
        out |= {
            "policy": tally.policy_name,
            "approvals": tally.approvals,
            "approvals_required": tally.approvals_required,
            "denials": tally.denials,
            "denials_to_reject": tally.denials_to_reject,
        }
    if args.json:
        common.print_json(out)
    else:
        print(describe(approval, tally))
    return common.EXIT_OK


def describe(approval: approvals.Approval, tally: approvals.Tally | None) -> str:
    """One line: the request, its status and, while pending, how far its votes are."""
    line = f"{approval.approval_request_id} {approval.status.value}"
    if tally is not None and approval.status is approvals.ApprovalStatus.PENDING:
        line += (
            f" ({tally.approvals} of {tally.approvals_required} approvals,"
            f" {tally.denials} of {tally.denials_to_reject} denials)"
        )
    return line
