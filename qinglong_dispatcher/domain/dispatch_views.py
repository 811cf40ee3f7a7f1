"""What `dispatch list` and `dispatch show` read: pure views of dispatches, never a lease token.

The views have no token field at all, and the statements that fill them never select one, so
no output built from them can carry a lease token. A plan is shown only as its redacted
preview (`plan_previews`): its sensitive members as size and digest prefix, never as values.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import (
    errors,
    keysets,
    ledger_lines,
    records,
    recovery,
    runs,
    states,
    targets,
    uncertainty,
    waits,
)
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus
from qinglong_dispatcher.domain.tools import steps

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500

CURSOR_FORMAT: Final = "<created_at_ms>:<dispatch_id>"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cursor:
    """A keyset position in the newest-first order: the last row a page showed."""

    created_at_ms: int
    dispatch_id: str

    def __str__(self) -> str:
        return f"{self.created_at_ms}:{self.dispatch_id}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """A cursor as `dispatch list` prints it; anything else is `InvalidInput`."""
        created_at_ms, dispatch_id = keysets.parse(text, form=CURSOR_FORMAT)
        return cls(created_at_ms=created_at_ms, dispatch_id=dispatch_id)


def stored_condition(status: EffectiveStatus) -> tuple[ExecutionStatus, bool | None]:
    """The stored status an effective status is, and whether its lease must have expired
    (True), must not have (False), or does not matter (None) at the settling instant."""
    if status is EffectiveStatus.RECOVERY_REQUIRED:
        return ExecutionStatus.EXECUTING, True
    if status is EffectiveStatus.EXECUTING:
        return ExecutionStatus.EXECUTING, False
    return ExecutionStatus(status.value), None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListQuery:
    """One page of `dispatch list`: the filters, the page size and where the page starts."""

    status: EffectiveStatus | None = None
    action_type: str | None = None
    project_id: str | None = None
    limit: int = DEFAULT_LIMIT
    after: Cursor | None = None
    target: str | None = None
    """Only dispatches of this target."""
    from_ms: int | None = None
    """Only dispatches created at or after this instant (Unix ms)."""
    to_ms: int | None = None
    """Only dispatches created before this instant (Unix ms)."""

    def __post_init__(self) -> None:
        keysets.check_page(
            limit=self.limit,
            max_limit=MAX_LIMIT,
            action_type=self.action_type,
            project_id=self.project_id,
        )
        if self.from_ms is not None and self.to_ms is not None and self.from_ms >= self.to_ms:
            raise errors.InvalidInput("to_ms: must be after from_ms")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DispatchSummary:
    """One row of `dispatch list`; `status` is the effective one."""

    dispatch_id: str
    project_id: str
    action_type: str
    action_ref: str
    status: EffectiveStatus
    attempt: int
    max_attempts: int
    created_at_ms: int
    """When the dispatch was created (the list's order)."""
    updated_at_ms: int
    """When its execution row last changed."""
    result_code: str | None
    target: str | None = None
    waiting: targets.TargetWait | None = None
    """Why it waits for its target (`waiting_for_target held_by|busy_by D`), if it does."""
    wait: waits.Wait | None = None

    @classmethod
    def from_row(cls, row: records.RowLike, *, settling_ms: int) -> DispatchSummary:
        """A `list_dispatches` row, its status decided at the settling instant."""
        return cls(
            dispatch_id=row["dispatch_id"],
            project_id=row["project_id"],
            action_type=row["action_type"],
            action_ref=row["action_ref"],
            status=states.effective_status(
                ExecutionStatus(row["status"]), row["lease_expires_at_ms"], settling_ms
            ),
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            created_at_ms=row["created_at_ms"],
            updated_at_ms=row["updated_at_ms"],
            result_code=row["result_code"],
            target=row["target"],
            waiting=targets.TargetWait.from_row(row, settling_ms=settling_ms),
            wait=waits.Wait.from_row(row, now_ms=settling_ms),
        )

    @property
    def cursor(self) -> Cursor:
        """The position right after this row."""
        return Cursor(created_at_ms=self.created_at_ms, dispatch_id=self.dispatch_id)

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {
            "dispatch_id": self.dispatch_id,
            "project_id": self.project_id,
            "action_type": self.action_type,
            "action_ref": self.action_ref,
            "status": self.status.value,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "result_code": self.result_code,
            "target": self.target,
            targets.WAITING_FOR_TARGET: None if self.waiting is None else self.waiting.as_dict(),
            "wait": None if self.wait is None else self.wait.as_dict(),
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """A page of dispatches, newest first; `next` is None on the last page."""

    dispatches: tuple[DispatchSummary, ...]
    next: Cursor | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionView:
    """The execution row without its lease token."""

    status: ExecutionStatus
    effective_status: EffectiveStatus
    version: int
    attempt: int
    max_attempts: int
    takeovers: int
    """Expired leases taken over before the barrier: refunded claims, no failures."""
    max_takeovers: int
    """The takeover bound (`states.max_takeovers`); past it the row ends `takeovers_exhausted`."""
    eligible_at_ms: int | None
    retry_at_ms: int | None
    lease_owner: str | None
    lease_expires_at_ms: int | None
    started_at_ms: int | None
    completed_at_ms: int | None
    result_code: str | None
    result_mutation_id: str | None
    receipt: Mapping[str, object] | None
    """The action receipt committed with the completion (external actions), as JSON."""
    receipt_digest: str | None
    created_at_ms: int
    updated_at_ms: int
    waiting_for_target: targets.TargetWait | None = None
    """Why it waits for its target, if it does (`domain/targets.py`)."""
    on_unknown: str = targets.HOLD
    """Its policy's rule should its outcome be unknown (`targets.HOLD`, `targets.PROCEED`)."""
    window: waits.Window | None = None
    wait: waits.Wait | None = None

    @classmethod
    def from_row(cls, row: records.RowLike, *, settling_ms: int) -> ExecutionView:
        """The execution columns of a `select_dispatch_view` row."""
        status = ExecutionStatus(row["status"])
        return cls(
            status=status,
            effective_status=states.effective_status(
                status, row["lease_expires_at_ms"], settling_ms
            ),
            version=row["version"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            takeovers=row["takeovers"],
            max_takeovers=states.max_takeovers(row["max_attempts"]),
            eligible_at_ms=row["eligible_at_ms"],
            retry_at_ms=row["retry_at_ms"],
            lease_owner=row["lease_owner"],
            lease_expires_at_ms=row["lease_expires_at_ms"],
            started_at_ms=row["started_at_ms"],
            completed_at_ms=row["completed_at_ms"],
            result_code=row["result_code"],
            result_mutation_id=row["result_mutation_id"],
            receipt=_receipt(row["result_receipt_json"]),
            receipt_digest=row["result_receipt_digest"],
            created_at_ms=row["created_at_ms"],
            updated_at_ms=row["updated_at_ms"],
            waiting_for_target=targets.TargetWait.from_row(row, settling_ms=settling_ms),
            on_unknown=targets.PROCEED if row["proceed_on_unknown"] else targets.HOLD,
            window=waits.window_of(row),
            wait=waits.Wait.from_row(row, now_ms=settling_ms),
        )

    def as_dict(self) -> dict[str, object]:
        """JSON members, statuses as text."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["status"] = self.status.value
        values["effective_status"] = self.effective_status.value
        values["receipt"] = None if self.receipt is None else dict(self.receipt)
        wait = self.waiting_for_target
        values["waiting_for_target"] = None if wait is None else wait.as_dict()
        values["window"] = None if self.window is None else self.window.as_dict()
        values["wait"] = None if self.wait is None else self.wait.as_dict()
        return values


def _receipt(receipt_json: str | None) -> Mapping[str, object] | None:
    # Canonical JSON the store wrote; anything else (a hand-edited file) shows as absent.
    if receipt_json is None:
        return None
    try:
        value = json.loads(receipt_json)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class StepRunView:
    """The tool StepRun a `tool.invoke` dispatch starts."""

    step_run_id: str
    run_id: str
    tool_id: str
    tool_version: int
    status: steps.StepRunStatus
    version: int
    result_code: str | None
    updated_at_ms: int

    @classmethod
    def of(cls, step: steps.StepRun) -> StepRunView:
        """The shown part of a StepRun row."""
        return cls(
            step_run_id=step.step_run_id,
            run_id=step.binding.run_id,
            tool_id=step.binding.tool_id,
            tool_version=step.binding.tool_version,
            status=step.status,
            version=step.version,
            result_code=step.result_code,
            updated_at_ms=step.updated_at_ms,
        )

    def as_dict(self) -> dict[str, object]:
        """JSON members, the status as text."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["status"] = self.status.value
        return values


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    """Everything `dispatch show` prints about one dispatch, read in one transaction.

    `run_id` is the Run of the dispatch: the one `run.create` created (from its receipt, else
    the Run holding the dispatch id as its idempotency key), or the Run a `tool.invoke` step
    belongs to.
    """

    dispatch: records.Dispatch
    plan: Mapping[str, object] | None
    """The plan's redacted preview (`plan_previews.preview`); None when it cannot be shown."""
    plan_code: str | None
    """Why `plan` is None: the store's code (`plan_keyring_missing`, `plan_key_unknown`,
    `plan_decrypt_failed`, `plan_corrupt`, `plan_missing`, `plan_unreadable`); None when it is
    shown."""
    execution: ExecutionView
    events: tuple[ledger_lines.EventView, ...]
    receipt: runs.RunReceipt | None
    run_id: str | None
    observation: recovery.Observation | None
    resolution: recovery.StoredResolution | None
    audit: tuple[recovery.AuditEvent, ...]
    step_run: StepRunView | None
    uncertain: uncertainty.UncertainOutcome | None = None
    """What the daemon knew when its execute answered `uncertain` (None otherwise)."""
    resubmitted_from: str | None = None
    """What its request was requested again from (a dispatch or an expired request)."""
    requested_again: tuple[str, ...] = ()
    """The requests made again from this dispatch, oldest first."""

    def verdicts(self) -> tuple[str, ...]:
        """What is known of an uncertain effect, in an operator's words (empty when none is)."""
        said: list[str] = []
        if self.resolution is not None:
            said.append(uncertainty.resolution_verdict(self.resolution, self.dispatch.action_type))
        elif self.observation is not None:
            said.append(uncertainty.observation_verdict(self.observation))
        elif self.execution.effective_status is EffectiveStatus.RECOVERY_REQUIRED:
            said.append("no recovery pass has looked yet: check the target")
        needs = self.execution.effective_status is EffectiveStatus.RECOVERY_REQUIRED
        if (needs or self.resolution is not None) and self.uncertain is None:
            said.append(
                "the daemon recorded nothing when it lost track (it stopped, or lost its "
                "lease or the database, while the action ran)"
            )
        if self.step_run is not None and (needs or self.resolution is not None):
            said.append(
                f"tool's last step: {self.step_run.step_run_id} is {self.step_run.status.value}"
            )
        return tuple(said)

    def as_dict(self) -> dict[str, object]:
        """JSON members (field names as in the store)."""
        dispatch = dataclasses.asdict(self.dispatch)
        resolution = None
        if self.resolution is not None:
            resolution = dataclasses.asdict(self.resolution)
            resolution["source"] = self.resolution.source.value
            resolution["resolution"] = self.resolution.resolution.value
        observation = None
        if self.observation is not None:
            observation = dataclasses.asdict(self.observation)
            observation["outcome"] = self.observation.outcome.value
        return {
            **dispatch,
            "plan": None if self.plan is None else dict(self.plan),
            "plan_code": self.plan_code,
            "execution": self.execution.as_dict(),
            "events": [event.as_dict() for event in self.events],
            "receipt": None if self.receipt is None else dataclasses.asdict(self.receipt),
            "run_id": self.run_id,
            "observation": observation,
            "resolution": resolution,
            "audit": [dataclasses.asdict(event) for event in self.audit],
            "step_run": None if self.step_run is None else self.step_run.as_dict(),
            "uncertain": None if self.uncertain is None else self.uncertain.as_dict(),
            "verdicts": list(self.verdicts()),
            "resubmitted_from": self.resubmitted_from,
            "requested_again": list(self.requested_again),
        }
