"""`example.note.write`'s evidence provider: read-only, the file proves the effect or not."""

from __future__ import annotations

import anyio.to_thread

from qinglong_action_note import notes, plan
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.domain import digests, recovery

EVIDENCE_TAG = "qinglong/example.note.write/evidence@v1"


class NoteEvidence:
    """Read-only: the file is there with exactly the approved bytes, or it is not."""

    action_type = plan.ACTION_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """`verified_succeeded`, `missing`, or `conflict`; an invisible directory raises."""
        dispatch = snapshot.dispatch
        note_plan = await self._plans.approved(dispatch, plan.NotePlan)  # a raise: unavailable
        found = await anyio.to_thread.run_sync(notes.read, dispatch.dispatch_id)
        if found is None:
            return recovery.Evidence(kind=recovery.EvidenceKind.MISSING, reason="note_missing")
        if found != notes.record(note_plan, dispatch):
            return recovery.Evidence(kind=recovery.EvidenceKind.CONFLICT, reason="note_mismatch")
        return recovery.Evidence(
            kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                EVIDENCE_TAG, {"dispatchId": dispatch.dispatch_id, "note": found.decode("utf-8")}
            ),
        )
