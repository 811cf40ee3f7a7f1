"""The execution store: claims, leases, the start barrier, completions, the page path and what
the status reads count."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from qinglong_dispatcher.domain import (
    records,
    states,
    uncertainty,
)
from qinglong_dispatcher.ports.transactions import Query

if TYPE_CHECKING:
    from qinglong_dispatcher.ports.approvals import StoredPlan

E = TypeVar("E")

BACKLOG_CAP = 100_000
"""Where the due gauge saturates: a scrape never reads more of the due index than this."""


class ExecutionStore(Protocol):
    """Claim, renew, start, release and complete executions under fences (docs/state-machine.md)."""

    async def claim_due(
        self,
        *,
        now_ms: int,
        owner: str,
        limit: int,
        lease_ms: int,
        skip_action_types: Collection[str] = (),
    ) -> records.ClaimBatch:
        """One due observation (≤ limit rows) and a fenced claim of each, in one transaction;
        rows of `skip_action_types` are not observed, and while it skips any it looks among
        the next due rows only (a window of a fixed size, decision 0060)."""
        ...

    async def claim(
        self, dispatch_id: str, *, now_ms: int, owner: str, token: str, lease_ms: int
    ) -> records.Claim:
        """Claim one row by id with the caller's token; replays an unexpired same-token lease."""
        ...

    async def renew(self, lease: records.Lease, *, now_ms: int, lease_ms: int) -> records.Renewal:
        """Extend an unexpired lease carrying the exact current version."""
        ...

    async def start(
        self, requests: Sequence[records.StartRequest], *, now_ms: int, lease_ms: int
    ) -> list[records.StartResult]:
        """Commit the start barrier (`leased → executing`) of each item; per-item results.

        The barrier also grants the item a fresh lease of `lease_ms` from `now_ms` (never a
        shorter one than it holds), so an execute never begins on the tail of a lease.
        """
        ...

    async def release_preflight(
        self,
        lease: records.Lease,
        *,
        mutation_id: str,
        kind: states.ReleaseKind,
        result_code: str,
        retry_at_ms: int | None,
        now_ms: int,
    ) -> records.Transition:
        """Give back a claim before the barrier: retry, blocked, the shutdown yield, or the
        wait of an action with no handler (pending again at `retry_at_ms`, attempt refunded)."""
        ...

    async def wake_handler_waits(
        self, action_types: Collection[str], *, now_ms: int
    ) -> tuple[str, ...]:
        """Make the `handler_missing` waits of these action types due at `now_ms` (a daemon
        that has their handlers, at its start); the dispatch ids woken."""
        ...

    async def complete(
        self,
        identity: records.ExecutionIdentity,
        *,
        mutation_id: str,
        completion: states.Completion,
        result_code: str,
        now_ms: int,
        receipt: records.ActionReceipt | None = None,
    ) -> records.Transition:
        """Record the terminal result of a started execution under its fence, with the
        action's receipt when it has one (`succeeded` and `failed` only)."""
        ...

    async def record_uncertain(self, lost: uncertainty.LostTrack) -> None:
        """Keep what an execute knew when it answered `uncertain`, beside its started row,
        under its fence (the row stays `executing`; a replay writes nothing)."""
        ...

    async def complete_many(
        self, requests: Sequence[CompletionRequest], *, now_ms: int
    ) -> list[records.Transition]:
        """`complete` of each request in ONE transaction, each under its own fence (per-item
        results); raises if the transaction fails, and then nothing of it is kept."""
        ...

    async def list_due(
        self, *, now_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> list[records.Execution]:
        """Read-only keyset page over the due index."""
        ...

    async def counts(self, *, now_ms: int) -> records.StatusCounts:
        """Counts per effective status, the due backlog and the number of Runs."""
        ...

    async def backlog(self, *, now_ms: int, cap: int = BACKLOG_CAP) -> records.Backlog:
        """Due count (saturating at `cap`), oldest due age, executing and recovery_required."""
        ...

    async def get_execution(self, dispatch_id: str) -> records.Execution | None:
        """One execution row."""
        ...

    async def get_dispatch(self, dispatch_id: str) -> records.Dispatch | None:
        """One immutable dispatch."""
        ...

    async def execution_events(self, dispatch_id: str) -> list[records.ExecutionEvent]:
        """The history of one execution, oldest first."""
        ...


class PageOutcome(enum.StrEnum):
    """What the page transaction did with one item."""

    COMMITTED = "committed"
    """Started, its effect, receipt and completion committed with the page: `succeeded`."""
    NOT_TAKEN = "not_taken"
    """Nothing written for it: it takes the per-item path under the same lease."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompletionRequest:
    """One completion of `complete_many`: what `complete` takes for one item."""

    identity: records.ExecutionIdentity
    mutation_id: str
    completion: states.Completion
    result_code: str
    receipt: records.ActionReceipt | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PageItem(Generic[E]):
    """One transactional item of a page: its start barrier request and its effect."""

    request: records.StartRequest
    dispatch: records.Dispatch
    effect: E
    """What its action writes for it (`PageEffects.create_page` reads it), built for the
    page's `now_ms` (`TransactionalHandler.page_effect`)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PageResult:
    """One item's result; `identity` (the started fence) is set when committed."""

    dispatch_id: str
    outcome: PageOutcome
    identity: records.ExecutionIdentity | None = None
    reason: str | None = None


class PageEffects(Protocol):
    """What a transactional action writes in the page transaction, in the caller's
    transaction: the store starts and completes the items, the action writes their effect."""

    @property
    def result_code(self) -> str:
        """The result code each committed item completes with."""
        ...

    async def effects_taken(self, q: Query, dispatches: Sequence[records.Dispatch]) -> set[str]:
        """The dispatches of a page whose effect already exists (the per-item path replays
        or refuses those)."""
        ...

    async def create_page(
        self,
        q: Query,
        done: Sequence[tuple[PageItem[Any], records.ExecutionIdentity]],
        *,
        now_ms: int,
    ) -> None:
        """The effect rows (and receipt) of each item the page transaction started."""
        ...


EffectOf = Callable[[records.Dispatch, "StoredPlan", int], object]
"""A transactional action's effect for a dispatch, from its plan as the passage read it and
the start time (`PassingHandler.passage_effect`); raises `errors.QinglongError` when
the plan is not the approved one (the row is then left to the claim)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Passed:
    """One dispatch a passage committed: its fence, as a start would have named it."""

    dispatch: records.Dispatch
    identity: records.ExecutionIdentity


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PassageBatch:
    """What one passage read (`observed`, ≤ its limit) and committed."""

    passed: tuple[Passed, ...]
    observed: int


class PageStore(Protocol):
    """The page transaction of transactional actions (docs/decisions/0006), and their
    passage (docs/decisions/0055)."""

    async def pass_due(
        self,
        action_type: str,
        effects: PageEffects,
        effect_of: EffectOf,
        *,
        now_ms: int,
        owner: str,
        limit: int,
    ) -> PassageBatch:
        """In ONE transaction: the due waiting rows of `action_type` (≤ limit; on PostgreSQL
        locked, skipping those another replica holds), each taken from `pending` straight to
        `succeeded` with its effect and receipt (`effects`, `effect_of`), one ledger line each.
        A row whose plan does not resolve, whose effect exists, or that the database would not
        admit is left waiting for the claim; a failure undoes the whole passage."""
        ...

    async def commit_page(
        self,
        effects: PageEffects,
        items: Sequence[PageItem[Any]],
        *,
        now_ms: int,
        lease_ms: int,
    ) -> list[PageResult]:
        """In ONE transaction, for each item: the fenced start (`leased → executing`), the
        effect (`effects`: the action's rows and receipt) and the completion (`executing →
        succeeded`), each with its ledger line. An item refused or failing is undone alone
        (`not_taken`); a crash before the commit leaves every item unstarted."""
        ...


class DispatchStore(ExecutionStore, PageStore, Protocol):
    """What the dispatcher needs of a store: executions and the page transaction."""
