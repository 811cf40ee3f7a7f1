"""Passages: the due rows of transactional actions taken from `pending` straight to
`succeeded`, each action's page in one transaction (`ports.PageStore.pass_due`,
docs/decisions/0055).

A transactional action's whole effect is rows in the dispatcher's own database, so its claim,
start barrier, effect, receipt and completion need not be separate commits: the passage reads
a page of its due rows inside its own transaction and commits them whole. What a passage
leaves waiting (a plan that does not resolve, an effect that exists, a failed passage) is
claimed by the same batch and goes the page or per-item path, which says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

import structlog

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.dispatching.dispatch_config import DispatchConfig
from qinglong_dispatcher.domain import errors, records

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")

Count = Callable[[str, str], None]
"""Adds one item outcome to the batch report: (action type, outcome)."""


@dataclasses.dataclass(kw_only=True)
class Passes:
    """What a batch's passages did."""

    observed: int = 0
    """The most rows one passage observed (a full page: more may be due)."""
    passed: int = 0
    """The rows passed: each a claim too (its attempt taken)."""
    full_types: set[str] = dataclasses.field(default_factory=set)
    """The actions whose passage passed a whole page."""

    @property
    def full(self) -> bool:
        """Whether a passage passed a whole page."""
        return bool(self.full_types)


class Passages:
    """Passes the due rows of each transactional action, one transaction per action's page."""

    def __init__(
        self,
        store: ports.PageStore,
        handlers: Mapping[str, ports.ApprovedActionHandler],
        clock: ports.Clock,
        config: DispatchConfig,
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config
        self._transactional: dict[str, ports.PassingHandler] = {
            action_type: handler
            for action_type, handler in handlers.items()
            if isinstance(handler, ports.PassingHandler)
        }
        self._idle: set[str] = set()
        """Actions whose last passage found nothing due: not tried again (a write transaction
        each batch for nothing) until the claim takes a row of theirs."""

    def claimed(self, action_types: Iterable[str]) -> None:
        """The claim took rows of these actions: their passages are worth trying again."""
        self._idle.difference_update(action_types)

    async def run(self, count: Count) -> Passes:
        """One passage per transactional action: what they observed and which passed a full
        page (more of that action may be due)."""
        passes = Passes()
        for action_type, handler in self._transactional.items():
            if action_type in self._idle:
                continue
            batch = await self._pass(action_type, handler, count)
            if batch.observed == 0:
                self._idle.add(action_type)
            passes.observed = max(passes.observed, batch.observed)
            passes.passed += len(batch.passed)
            if len(batch.passed) >= self._config.passage_page_size:
                passes.full_types.add(action_type)
        return passes

    async def _pass(
        self, action_type: str, handler: ports.PassingHandler, count: Count
    ) -> ports.PassageBatch:
        def effect_of(dispatch: records.Dispatch, stored: ports.StoredPlan, at_ms: int) -> object:
            return handler.passage_effect(dispatch, stored, started_at_ms=at_ms)

        config = self._config
        try:
            batch = await self._store.pass_due(
                action_type,
                handler.page_effects,
                effect_of,
                now_ms=self._clock.now_ms(),
                owner=config.owner,
                limit=config.passage_page_size,
            )
        except errors.StoreFull:
            raise  # the tick fails (one event), as a full page transaction does
        except errors.StoreError as exc:
            # Rolled back whole: the claim takes its rows, and their paths say why.
            log.warning("dispatch.passage_failed", action_type=action_type, code=exc.code)
            return ports.PassageBatch(passed=(), observed=0)
        for passed in batch.passed:
            count(action_type, "succeeded")
            _trace_passed(passed)
        if batch.passed:
            # One event for the passage, as for a committed page (docs/performance.md).
            log.info(
                "dispatch.page_committed",
                outcome="succeeded",
                path="passage",
                count=len(batch.passed),
                dispatch_ids=[p.dispatch.dispatch_id for p in batch.passed],
            )
        return batch


def _trace_passed(passed: ports.Passed) -> None:
    """A passed dispatch's `dispatch.claim` span, once its passage committed (its claim,
    start, effect and completion were that one transaction)."""
    if not tracing.current().enabled:
        return
    lease = passed.identity.as_lease()
    with tracing.claim_span(passed.dispatch, lease, taken_over=False) as span:
        span.set("qinglong.page", True)
        span.set("qinglong.passage", True)
        span.set("qinglong.outcome", "succeeded")
