"""The page path: a claimed page's transactional items start, take effect and complete in one
transaction (`ports.PageStore.commit_page`), one per action, which supplies its effect.

Only items of a `ports.TransactionalHandler` whose `inspect` is ready take it; the
rest, and every item the page transaction did not take, go on to the per-item path
(`claimed_item.ItemRunner`) under the same lease — nothing was written for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import structlog

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.dispatching.claimed_item import FaultHook
from qinglong_dispatcher.dispatching.dispatch_config import DispatchConfig
from qinglong_dispatcher.domain import errors, records

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")

Count = Callable[[str, str], None]
"""Adds one item outcome to the batch report: (action type, outcome)."""


class PagePath:
    """Takes the transactional items of a claimed page through one page transaction."""

    def __init__(
        self,
        store: ports.PageStore,
        handlers: Mapping[str, ports.ApprovedActionHandler],
        clock: ports.Clock,
        config: DispatchConfig,
        *,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config
        self._fault_hook = fault_hook
        self._transactional: dict[str, ports.TransactionalHandler] = {
            action_type: handler
            for action_type, handler in handlers.items()
            if isinstance(handler, ports.TransactionalHandler)
        }
        self._inspectors = dict(handlers)

    async def _fault(self, point: str, dispatch: records.Dispatch) -> None:
        if self._fault_hook is not None:
            await self._fault_hook(point, dispatch)

    async def run(self, claims: Sequence[records.Claim], count: Count) -> list[records.Claim]:
        """Commit what the page transaction can; return the claims left for the per-item path."""
        ready: list[records.Claim] = []
        rest: list[records.Claim] = []
        for claim in claims:
            assert claim.dispatch is not None
            if claim.dispatch.action_type in self._transactional and await self._ready(claim):
                ready.append(claim)
            else:
                rest.append(claim)
        if not ready:
            return rest
        now = self._clock.now_ms()
        pages: dict[str, list[tuple[records.Claim, ports.PageItem[object]]]] = {}
        for claim in ready:
            assert claim.lease is not None
            assert claim.dispatch is not None
            dispatch = claim.dispatch
            try:
                effect = self._transactional[dispatch.action_type].page_effect(
                    dispatch, started_at_ms=now
                )
            except errors.QinglongError:
                rest.append(claim)  # the per-item path inspects again and says why
                continue
            request = records.StartRequest(
                lease=claim.lease,
                approval_request_id=dispatch.approval_request_id,
                action_digest=dispatch.action_digest,
            )
            item = ports.PageItem(request=request, dispatch=dispatch, effect=effect)
            pages.setdefault(dispatch.action_type, []).append((claim, item))
        for action_type, page in pages.items():
            rest += await self._commit(
                self._transactional[action_type].page_effects, page, now, count
            )
        return rest

    async def _commit(
        self,
        effects: ports.PageEffects,
        page: Sequence[tuple[records.Claim, ports.PageItem[object]]],
        now: int,
        count: Count,
    ) -> list[records.Claim]:
        """One page transaction for one action's items; the claims it did not take."""
        try:
            results = await self._store.commit_page(
                effects, [item for _, item in page], now_ms=now, lease_ms=self._config.lease_ms
            )
        except errors.StoreFull:
            # Rolled back whole: the tick fails (one event); the page is claimed again once
            # its leases have run out, with nothing of it written meanwhile.
            raise
        except errors.StoreError as exc:
            # Committed or not, the per-item path replays each under its fence: a committed
            # item's start is refused there (never executed twice), an uncommitted one runs.
            log.warning("dispatch.page_failed", code=exc.code, items=len(page))
            return [claim for claim, _ in page]
        return await self._settle(page, results, count)

    async def _ready(self, claim: records.Claim) -> bool:
        """Inspect as the per-item path would; anything but a ready, matching plan goes there."""
        dispatch = claim.dispatch
        assert dispatch is not None
        await self._fault("after_claim", dispatch)
        try:
            inspected = await self._inspectors[dispatch.action_type].inspect(dispatch)
        except Exception:  # side-effect free: the per-item path inspects again and says why
            return False
        await self._fault("after_inspect", dispatch)
        return (
            inspected.kind is ports.InspectKind.READY
            and inspected.action_digest == dispatch.action_digest
        )

    async def _settle(
        self,
        page: Sequence[tuple[records.Claim, ports.PageItem[object]]],
        results: Sequence[ports.PageResult],
        count: Count,
    ) -> list[records.Claim]:
        committed: list[records.Dispatch] = []
        not_taken: dict[str, str] = {}
        left: list[records.Claim] = []
        for (claim, item), result in zip(page, results, strict=True):
            if result.outcome is ports.PageOutcome.COMMITTED:
                committed.append(item.dispatch)
                count(item.dispatch.action_type, "succeeded")
                _trace_committed(claim)
            else:
                not_taken[result.dispatch_id] = result.reason or "not_taken"
                left.append(claim)
        if committed:
            # One event for the page, not three renders per dispatch (docs/performance.md).
            log.info(
                "dispatch.page_committed",
                outcome="succeeded",
                count=len(committed),
                dispatch_ids=[d.dispatch_id for d in committed],
            )
        if not_taken:
            log.info("dispatch.page_not_taken", reasons=not_taken)
        for dispatch in committed:
            await self._fault("after_page", dispatch)
        return left


def _trace_committed(claim: records.Claim) -> None:
    """A committed item's `dispatch.claim` span, once its page transaction committed (its
    start, effect and completion were that one transaction, shared with the page's others)."""
    if not tracing.current().enabled:
        return
    assert claim.dispatch is not None
    assert claim.lease is not None
    tracing.mark_committed_claim(
        claim.dispatch, claim.lease, taken_over=claim.taken_over is not None
    )
