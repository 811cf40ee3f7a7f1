"""The `tool.invoke` evidence provider: the start barrier and the file `builtin.file.write` left.

Read-only. `verified_succeeded` needs the dispatch's barrier and the file holding exactly the
planned content; an absent file is `missing`, anything else `conflict`. A sandbox this
replica cannot see (unset, absent, unmounted: the project directory is not there) raises,
which the reconciler records as `unavailable` — never `missing`, which would invite an
operator to fail a step whose file may well exist on the shared storage.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio.to_thread

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions.tool_invoke import invocations as tool_invocations
from qinglong_dispatcher.actions.tool_invoke import plan as plan_model
from qinglong_dispatcher.actions.tool_invoke import sandbox
from qinglong_dispatcher.domain import digests, errors, plans, recovery
from qinglong_dispatcher.domain.tools import registry as tool_registry

Kind = recovery.EvidenceKind
EVIDENCE_TAG = "qinglong/tool-file-evidence@v1"
ACTION_TYPE = plan_model.ACTION_TYPE

_MODELS: plans.PlanModels = {ACTION_TYPE: plan_model.ToolInvocationPlan}
_ABSENT = "absent"
_NOT_REGULAR = "not_regular"


def look(configured: Path | None, project_id: str, dispatch_id: str) -> str:
    """The file's SHA-256, `absent` or `not_regular`; raises when the sandbox is not visible."""
    root = sandbox.root(configured)
    directory = sandbox.require_inside(root, sandbox.project_dir(root, project_id))
    target = directory / sandbox.target(root, project_id, dispatch_id).name
    try:
        info = target.lstat()
    except FileNotFoundError:
        return _ABSENT
    if os.path.islink(target) or not os.path.isfile(target):
        return _NOT_REGULAR
    if info.st_size > tool_registry.MAX_CONTENT_BYTES:
        return _NOT_REGULAR
    return sandbox.content_sha256(target.read_bytes())


class ToolInvokeEvidence:
    """Bounded reads: the plan, the barrier by its derived start id, one file."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plan_store: ports.PlanStore,
        barriers: ports.ToolExecutionStartBarrierRepository,
        sandbox_dir: Path | None,
    ) -> None:
        self._plans = plan_store
        self._barriers = barriers
        self._sandbox_dir = sandbox_dir

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """Verify the barrier and the file against the snapshot's dispatch."""
        dispatch = snapshot.dispatch
        stored = await self._plans.get_plan(dispatch.project_id, dispatch.action_ref)
        if stored is None:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="plan_missing")
        if stored.action_type != ACTION_TYPE:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="plan_type_mismatch")
        data = stored.plan_bytes()  # a plan that does not open: unavailable, never a conflict
        try:
            plan = plans.parse_plan(ACTION_TYPE, data, models=_MODELS)
        except errors.InvalidInput:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="plan_invalid")
        assert isinstance(plan, plan_model.ToolInvocationPlan)
        start_id = tool_invocations.ids_for(dispatch.dispatch_id).start_id
        stored_barrier = await self._barriers.get_by_start_id(start_id)  # corrupted: raises
        found = await anyio.to_thread.run_sync(
            look, self._sandbox_dir, plan.project_id, dispatch.dispatch_id
        )
        if stored_barrier is None:
            if found != _ABSENT:
                return recovery.Evidence(kind=Kind.CONFLICT, reason="effect_without_barrier")
            return recovery.Evidence(kind=Kind.MISSING, reason="barrier_missing")
        barrier = stored_barrier.barrier
        if (barrier.dispatch_id, barrier.approval_request_id, barrier.action_digest) != (
            dispatch.dispatch_id,
            dispatch.approval_request_id,
            dispatch.action_digest,
        ):
            return recovery.Evidence(kind=Kind.CONFLICT, reason="barrier_mismatch")
        if found == _ABSENT:
            return recovery.Evidence(kind=Kind.MISSING, reason="file_missing")
        planned = sandbox.content_sha256(plan.content.encode("utf-8"))
        if found != planned:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="file_content_mismatch")
        return recovery.Evidence(
            kind=Kind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                EVIDENCE_TAG,
                {
                    "dispatchId": dispatch.dispatch_id,
                    "barrierDigest": stored_barrier.barrier_digest,
                    "contentSha256": found,
                },
            ),
        )
