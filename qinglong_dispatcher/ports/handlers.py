"""Ports of the approved actions (docs/actions.md): handlers, their results, evidence providers.

An action type is served by an `ApprovedActionHandler` (inspect, then execute after the start
barrier) and by an `EvidenceProvider` (read-only, for recovery); `bootstrap` registers both.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from qinglong_dispatcher.domain import records, recovery, states
from qinglong_dispatcher.ports.approvals import StoredPlan
from qinglong_dispatcher.ports.executions import PageEffects


class InspectKind(enum.StrEnum):
    """What `inspect` found."""

    READY = "ready"
    BLOCKED = "blocked"
    TRANSIENT = "transient"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class InspectResult:
    """`inspect`'s answer: the plan's action digest when ready, a low-sensitivity code otherwise."""

    kind: InspectKind
    action_digest: str | None = None
    code: str | None = None


class ExecuteKind(enum.StrEnum):
    """What `execute` reports."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    COMMITTED = "committed"
    """The action completed the execution inside its own effect transaction."""
    UNCERTAIN = "uncertain"
    """The effect may or may not have happened (a 5xx, a reset or a timeout after sending, a
    command that does not fail cleanly): the dispatcher writes nothing and stops renewing, so
    the lease runs out and the row is `recovery_required`, settled only by evidence or an
    operator. Never a retry."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecuteResult:
    """`execute`'s answer with a low-sensitivity result code."""

    kind: ExecuteKind
    code: str
    committed_as: states.Completion = states.Completion.SUCCEEDED
    """For `committed`: the terminal status the action's own transaction wrote."""
    receipt: Mapping[str, object] | None = None
    """For `succeeded` and `failed`: what the downstream system answered (status, selected
    headers, digests — never a body or a secret), committed with the completion as the
    dispatch's action receipt. Canonical-JSON values only, at most 16 KiB."""
    evidence: Mapping[str, object] | None = None
    """For `uncertain`: what the action knew when it lost track (an exit code, a signal, a
    duration, a redacted stderr head; an HTTP status or transport error and how far the
    request got), redacted by the action, kept beside the row for the operator who settles it
    (`domain.uncertainty`). Canonical-JSON values only, at most 16 KiB; never a secret."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ExecutionContext:
    """What `execute` gets: the dispatch (its id is the idempotency key) and the fence."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity
    deadline_ms: int
    traceparent: str | None = None
    """The W3C trace context an effect carries downstream (`http.request`'s `traceparent`
    header, `command.run`'s `TRACEPARENT`): the execute span's when tracing is on, else the
    one the dispatch was submitted under; None: neither, and nothing is sent."""

    @property
    def idempotency_key(self) -> str:
        """Downstream systems key their idempotency on the dispatch id."""
        return self.dispatch.dispatch_id


@runtime_checkable
class PrefetchingHandler(Protocol):
    """A handler that can read what a whole page's `inspect`s need in one go (optional)."""

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """Warm whatever `inspect` will read; a failure here only costs the later reads."""
        ...


class ApprovedActionHandler(Protocol):
    """An action: side-effect-free `inspect`, then `execute` only after the barrier."""

    action_type: str

    async def inspect(self, dispatch: records.Dispatch) -> InspectResult:
        """Resolve the immutable plan and return its digest; no side effects."""
        ...

    async def execute(self, ctx: ExecutionContext) -> ExecuteResult:
        """Perform the action; called only once `start` has committed."""
        ...


@runtime_checkable
class TransactionalHandler(Protocol):
    """A handler declaring that its whole effect is rows in the dispatcher's own database.

    Its ready items are not started by a barrier committed on its own: in one transaction per
    page, each item's start, effect, receipt and completion commit together (`ports.PageStore`),
    which is at-most-once without a window between barrier and effect. The action supplies
    what its items write there (`page_effects`, one `page_effect` per item); every other
    action keeps barrier-then-execute. The handler's `execute` still serves an item the page
    did not take (the per-item path).
    """

    @property
    def page_effects(self) -> PageEffects:
        """What the page transaction writes for this action's items."""
        ...

    def page_effect(self, dispatch: records.Dispatch, *, started_at_ms: int) -> object:
        """This dispatch's effect if it starts at `started_at_ms` (`PageItem.effect`); called
        only after a ready `inspect` of the same dispatch, and side-effect free."""
        ...


@runtime_checkable
class PassingHandler(TransactionalHandler, Protocol):
    """A transactional handler whose due rows pass: claim, start, effect, receipt and
    completion in one transaction, the row from `pending` straight to `succeeded`
    (docs/decisions/0055; the database admits it only for a type the owner marked
    transactional). A row a passage leaves is claimed and takes the page transaction."""

    def passage_effect(
        self, dispatch: records.Dispatch, stored: StoredPlan, *, started_at_ms: int
    ) -> object:
        """This dispatch's effect in a passage (`ports.EffectOf`): its plan `stored` as the
        passage's transaction read it, checked against the approved digest as `inspect` would
        (`errors.QinglongError` otherwise); side-effect free, no I/O."""
        ...


@runtime_checkable
class Closable(Protocol):
    """A handler or evidence provider holding something to release at shutdown (an HTTP
    client's connections); the dispatcher and the reconciler close those they hold."""

    async def aclose(self) -> None:
        """Release what it holds; called once, after the last execute or evidence."""
        ...


class EvidenceProvider(Protocol):
    """Reads an action's trusted evidence; read-only, no way to execute."""

    action_type: str

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """`verified_succeeded`, `missing` or `conflict`; raising means `unavailable`."""
        ...
