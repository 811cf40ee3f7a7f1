"""The `run.create` evidence provider: reads the receipt and the Run, nothing else.

What it must prove, and why nothing else may settle a row: docs/decisions/0002.
"""

from __future__ import annotations

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import recovery, runs

Kind = recovery.EvidenceKind


class RunCreateEvidence:
    """Bounded primary/unique-key reads; store errors propagate and become `unavailable`."""

    action_type = "run.create"

    def __init__(self, repository: ports.RunCreateRepository) -> None:
        self._repository = repository

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """Verify the receipt and its Run against the snapshot's dispatch and fence."""
        dispatch, fence = snapshot.dispatch, snapshot.fence
        receipt = await self._repository.get_receipt(dispatch.dispatch_id)
        if receipt is None:
            collision = await self._repository.get_run_by_key(
                dispatch.project_id, dispatch.dispatch_id
            )
            if collision is not None:
                return recovery.Evidence(kind=Kind.CONFLICT, reason="idempotency_key_collision")
            return recovery.Evidence(kind=Kind.MISSING, reason="receipt_missing")
        if receipt.execution_version > fence.version:
            # A receipt from the future of this snapshot cannot belong to it.
            return recovery.Evidence(kind=Kind.CONFLICT, reason="receipt_version_ahead")
        if receipt.dispatch_id != dispatch.dispatch_id:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="receipt_dispatch_mismatch")
        run = await self._repository.get_run(receipt.resource_id)
        mismatch = runs.receipt_mismatch(
            receipt,
            run,
            approval_request_id=dispatch.approval_request_id,
            project_id=dispatch.project_id,
            action_digest=dispatch.action_digest,
            attempt=fence.attempt,
            started_at_ms=fence.started_at_ms,
        )
        if mismatch is not None:
            return recovery.Evidence(kind=Kind.CONFLICT, reason=mismatch)
        return recovery.Evidence(
            kind=Kind.VERIFIED_SUCCEEDED, evidence_digest=receipt.evidence_digest
        )
