"""Cancelling a waiting dispatch: who may, from which states, what is recorded.

A cancel is decided like a claim: on the locked row, at its version, and only while the row
waits in `CANCELLABLE`. Whichever of a claim and a cancel commits first wins; the other sees
the changed row and is refused cleanly, so a cancelled dispatch never reaches the barrier.
"""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher.domain import records, states

AUDIT_CANCELLED = "dispatch.cancelled"
"""`security_audit_events.kind` of a cancel."""

STEP_RUN_RESOLUTION = "failed"
"""What a cancelled tool dispatch's StepRun becomes: its step will never run."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cancel:
    """An operator's request; `reason_code` is a low-sensitivity code, never free text."""

    dispatch_id: str
    operator: str
    reason_code: str


def refusal(execution: records.Execution) -> str | None:
    """Why this row cannot be cancelled now, or None when it can."""
    if execution.status in states.CANCELLABLE:
        return None
    return execution.status.value


def mutation_id(dispatch_id: str) -> str:
    """One cancel per dispatch ever: `cancelled` is terminal."""
    return f"{dispatch_id}:cancel"
