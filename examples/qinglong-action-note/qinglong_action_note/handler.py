"""`example.note.write`'s handler: inspect reads only; execute writes the one file."""

from __future__ import annotations

import anyio.to_thread

from qinglong_action_note import notes, plan
from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.domain import errors, records


class NoteHandler:
    """Inspect reads only; execute writes the one file."""

    action_type = plan.ACTION_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """The plan's digest, or blocked (bad plan), or transient (no notes directory)."""
        try:
            _, digest = await self._plans.resolve(dispatch, plan.NotePlan)
        except errors.PlanInvalid as exc:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=exc.code)
        try:
            await anyio.to_thread.run_sync(notes.directory)
        except errors.ConfigurationError as exc:
            return ports.InspectResult(kind=ports.InspectKind.TRANSIENT, code=exc.code)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Write the note; the dispatch id names the file, so it is the idempotency key."""
        try:
            note_plan = await self._plans.approved(ctx.dispatch, plan.NotePlan)
            directory = await anyio.to_thread.run_sync(notes.directory)
        except errors.QinglongError as exc:
            # Nothing written yet: an explicit failure. A raise from here on is indeterminate.
            failed = ports.ExecuteKind.FAILED
            return ports.ExecuteResult(kind=failed, code=exc.code)
        content = notes.record(note_plan, ctx.dispatch)
        outcome = await anyio.to_thread.run_sync(
            notes.write, directory, ctx.idempotency_key, content
        )
        if outcome == "conflict":
            return ports.ExecuteResult(kind=ports.ExecuteKind.FAILED, code="note_conflict")
        return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code=f"note_{outcome}")
