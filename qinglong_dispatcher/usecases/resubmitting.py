"""Request again: a failed, blocked or cancelled dispatch, or an expired request, becomes a new
pending approval request for the same plan under a new action ref (`dispatch resubmit`,
`POST /api/v1/dispatches/{id}/resubmit`, the operator UI's "Request again").

Nothing is retried by itself: the new request needs its approval like any other, and the old
dispatch stays as it is. The plan is read whole (opened, where plans are sealed) by the store
that may read it — the daemon's own on the API, the login's on the command line — and only its
`actionRef` changes; the request is then written by the store acting as the principal, so the
database refuses a principal that may not create requests exactly as it refuses its submit,
and the store seals the new plan under its own action ref. The plaintext never leaves the
process.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Final, Protocol

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import plan as tool_invoke
from qinglong_dispatcher.domain import approvals, errors, ids, plans, principals, states
from qinglong_dispatcher.usecases import policy, requesting

RESUBMITTABLE: Final = frozenset(
    {
        states.ExecutionStatus.FAILED,
        states.ExecutionStatus.BLOCKED,
        states.ExecutionStatus.CANCELLED,
    }
)
"""Execution states a dispatch may be requested again from: finished without its effect
succeeding. `succeeded` is done; anything else is still moving (or `recovery_required`, which
an operator settles first: requesting it again could do the effect twice)."""

BOUND_TYPES: Final = frozenset({tool_invoke.ACTION_TYPE})
"""Action types whose plan is bound to another record (a `tool.invoke` plan to its StepRun,
written with it): a bare new request could never run, so they are refused."""


class ReadStore(ports.ExecutionStore, ports.ApprovalStore, ports.PlanStore, Protocol):
    """What the source is read from: the dispatch or request, and its whole plan."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Source:
    """What is requested again: the plan's identity and where it was found."""

    project_id: str
    action_type: str
    action_ref: str
    action_digest: str
    dispatch_id: str | None
    approval_request_id: str

    @property
    def origin(self) -> str:
        """The id the new request names as what it was requested again from: the dispatch,
        or (none having been made) the expired request."""
        return self.dispatch_id or self.approval_request_id


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Resubmitted:
    """The new pending request and what it was requested again from."""

    approval: approvals.Approval
    source: Source


async def find_source(reader: ReadStore, source_id: str) -> Source:
    """The dispatch `source_id` (failed, blocked or cancelled), or the request `source_id`
    (expired); `DispatchNotFound` for neither, `ResubmitRefused` for another state."""
    if not plans.is_identifier(source_id):
        raise errors.DispatchNotFound("no dispatch has this id (not a dispatch id)")
    dispatch = await reader.get_dispatch(source_id)
    if dispatch is not None:
        execution = await reader.get_execution(source_id)
        status = None if execution is None else execution.status
        if status not in RESUBMITTABLE:
            shown = "-" if status is None else status.value
            raise errors.ResubmitRefused(
                f"dispatch {source_id} is {shown}: only a failed, blocked or cancelled "
                "dispatch is requested again"
            )
        return Source(
            project_id=dispatch.project_id,
            action_type=dispatch.action_type,
            action_ref=dispatch.action_ref,
            action_digest=dispatch.action_digest,
            dispatch_id=dispatch.dispatch_id,
            approval_request_id=dispatch.approval_request_id,
        )
    request = await reader.get_approval(source_id)
    if request is None:
        raise errors.DispatchNotFound(f"no dispatch or approval request {source_id}")
    if request.status is not approvals.ApprovalStatus.EXPIRED:
        raise errors.ResubmitRefused(
            f"approval request {source_id} is {request.status.value}: only an expired "
            "request is requested again"
        )
    return Source(
        project_id=request.project_id,
        action_type=request.action_type,
        action_ref=request.action_ref,
        action_digest=request.action_digest,
        dispatch_id=None,
        approval_request_id=request.approval_request_id,
    )


async def renewed_plan(
    reader: ports.PlanStore,
    source: Source,
    *,
    installed: Callable[[], plans.PlanModels] | None = None,
) -> plans.AnyPlan:
    """The source's plan, checked against the digest its request bound, under a fresh action
    ref. A plan that does not open here (sealed, and no key ring) is `ResubmitRefused` with
    the store's code: nothing is written."""
    if source.action_type in BOUND_TYPES:
        raise errors.ResubmitRefused(
            f"a {source.action_type} plan is bound to its step: submit the step again instead"
        )
    stored = await reader.get_plan(source.project_id, source.action_ref)
    if stored is None:
        raise errors.ResubmitRefused("the plan is no longer stored (pruned)")
    try:
        old = requesting.parse_plan(source.action_type, stored.plan_bytes(), installed=installed)
    except errors.PlanInvalid as exc:
        raise errors.ResubmitRefused(f"the stored plan cannot be read ({exc.code})") from None
    if plans.plan_action_digest(old, reader.plan_digests) != source.action_digest:
        raise errors.ResubmitRefused("the stored plan differs from the approved one")
    data = json.loads(stored.plan_bytes())
    data["actionRef"] = ids.new_action_ref()
    return requesting.parse_plan(source.action_type, data, installed=installed)


async def resubmit(
    reader: ReadStore,
    writer: requesting.RequestStore,
    clock: ports.Clock,
    the_policy: policy.Policy,
    source_id: str,
    *,
    requested_by: str,
    context: principals.RequestContext | None = None,
    installed: Callable[[], plans.PlanModels] | None = None,
) -> Resubmitted:
    """Request `source_id`'s plan again as a new pending request written by `writer` (the
    principal's store); `reader` reads the source and its plan."""
    plans.require_identifier("requested-by", requested_by)
    source = await find_source(reader, source_id)
    plan = await renewed_plan(reader, source, installed=installed)
    approval = await requesting.request_approval(
        writer,
        clock,
        the_policy,
        plan,
        requested_by=requested_by,
        context=context,
        resubmitted_from=source.origin,
    )
    return Resubmitted(approval=approval, source=source)
