"""`example.note.write`: write one note file per dispatch — an installed action, as an example.

The effect is `$QINGLONG_NOTE_DIR/<dispatch id>.json`, created atomically (written to a
temporary file, fsynced, then linked into place, which fails if the name exists) and holding
the dispatch id, the approved action digest and the text. The file is the effect and its
own receipt at once: it exists whole or not at all, so the evidence provider can say for
certain whether the effect happened.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated, ClassVar

import anyio.to_thread
from pydantic import StringConstraints, field_validator

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.domain import canonical, digests, errors, plans, records, recovery

ACTION_TYPE = "example.note.write"
DIR_VARIABLE = "QINGLONG_NOTE_DIR"
EVIDENCE_TAG = "qinglong/example.note.write/evidence@v1"


class NotePlan(plans.PlanModel):
    """Plan v1: the text of the note (schemaVersion, actionRef and projectId come with the base)."""

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE

    text: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=1000)]

    @field_validator("text")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("must be printable text")
        return value


def _directory() -> Path:
    """The notes directory; it must exist (nothing here creates it)."""
    configured = os.environ.get(DIR_VARIABLE)
    if not configured:
        raise errors.ConfigurationError(f"{DIR_VARIABLE} is not set", code="note_dir_unset")
    path = Path(configured)
    if not path.is_dir():
        raise errors.ConfigurationError(
            f"{DIR_VARIABLE} is not a directory", code="note_dir_missing"
        )
    return path


def _record(plan: NotePlan, dispatch: records.Dispatch) -> bytes:
    """The file's exact bytes: bound to the dispatch and to what was approved."""
    return canonical.dumps(
        {
            "dispatchId": dispatch.dispatch_id,
            "actionDigest": dispatch.action_digest,
            "text": plan.text,
        }
    )


def _write(directory: Path, dispatch_id: str, content: bytes) -> str:
    """Create `<dispatch id>.json` whole or not at all; `written`, `existing` or `conflict`."""
    target = directory / f"{dispatch_id}.json"
    temporary = directory / f".{dispatch_id}.{os.getpid()}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, target)
        outcome = "written"
    except FileExistsError:
        outcome = "existing" if target.read_bytes() == content else "conflict"
    finally:
        temporary.unlink()
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the new name is durable before we report success
    finally:
        os.close(descriptor)
    return outcome


def _read(dispatch_id: str) -> bytes | None:
    with contextlib.suppress(FileNotFoundError):
        return (_directory() / f"{dispatch_id}.json").read_bytes()
    return None


class NoteHandler:
    """Inspect reads only; execute writes the one file."""

    action_type = ACTION_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """The plan's digest, or blocked (bad plan), or transient (no notes directory)."""
        try:
            _, digest = await self._plans.resolve(dispatch, NotePlan)
        except errors.PlanInvalid as exc:
            return ports.InspectResult(kind=ports.InspectKind.BLOCKED, code=exc.code)
        try:
            await anyio.to_thread.run_sync(_directory)
        except errors.ConfigurationError as exc:
            return ports.InspectResult(kind=ports.InspectKind.TRANSIENT, code=exc.code)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Write the note; the dispatch id names the file, so it is the idempotency key."""
        try:
            plan = await self._plans.approved(ctx.dispatch, NotePlan)
            directory = await anyio.to_thread.run_sync(_directory)
        except errors.QinglongError as exc:
            # Nothing written yet: an explicit failure. A raise from here on is indeterminate.
            failed = ports.ExecuteKind.FAILED
            return ports.ExecuteResult(kind=failed, code=exc.code)
        content = _record(plan, ctx.dispatch)
        outcome = await anyio.to_thread.run_sync(_write, directory, ctx.idempotency_key, content)
        if outcome == "conflict":
            return ports.ExecuteResult(kind=ports.ExecuteKind.FAILED, code="note_conflict")
        return ports.ExecuteResult(kind=ports.ExecuteKind.SUCCEEDED, code=f"note_{outcome}")


class NoteEvidence:
    """Read-only: the file is there with exactly the approved bytes, or it is not."""

    action_type = ACTION_TYPE

    def __init__(self, ctx: contract.ActionContext) -> None:
        self._plans = ctx.plans

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """`verified_succeeded`, `missing`, or `conflict`; an invisible directory raises."""
        dispatch = snapshot.dispatch
        plan = await self._plans.approved(dispatch, NotePlan)  # a raise: unavailable
        found = await anyio.to_thread.run_sync(_read, dispatch.dispatch_id)
        if found is None:
            return recovery.Evidence(kind=recovery.EvidenceKind.MISSING, reason="note_missing")
        if found != _record(plan, dispatch):
            return recovery.Evidence(kind=recovery.EvidenceKind.CONFLICT, reason="note_mismatch")
        return recovery.Evidence(
            kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                EVIDENCE_TAG, {"dispatchId": dispatch.dispatch_id, "note": found.decode("utf-8")}
            ),
        )


ACTION = contract.ActionSpec(
    action_type=ACTION_TYPE,
    plan_model=NotePlan,
    handler=NoteHandler,
    evidence=NoteEvidence,
)
"""What the entry point names."""
