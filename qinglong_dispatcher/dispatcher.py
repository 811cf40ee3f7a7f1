"""`dispatch_batch`: one due observation, then claim → inspect → start → execute → complete.

The dispatcher owns no timer: the lifecycle (or `tick`) calls `dispatch_batch`. It never
executes an item whose start barrier has not committed, never executes an item twice, and
never retries after the barrier — a failed completion write leaves the row `executing`.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors, fencing, records, states
from qinglong_dispatcher.domain.records import Outcome

log = structlog.get_logger("qinglong_dispatcher.dispatcher")

START_REPLAY_MAX_WAIT_S = 0.5
"""Longest pause between replays of an unacknowledged `start` (they go on until the lease ends)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DispatchConfig:
    """The dispatcher's budget, from the profile."""

    owner: str
    page_size: int
    lease_ms: int
    concurrency: int
    retry_backoff_ms: int
    execute_timeout_ms: int

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= 64:
            raise errors.ConfigurationError("page size must be between 1 and 64")
        if self.execute_timeout_ms >= self.lease_ms:
            raise errors.ConfigurationError("execute timeout must be below the lease")


@dataclasses.dataclass(kw_only=True)
class BatchReport:
    """What one batch did: claim results, and what became of each claimed item."""

    page_size: int
    observed: int = 0
    claims: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_action: dict[str, collections.Counter[str]] = dataclasses.field(default_factory=dict)

    @property
    def full_page(self) -> bool:
        """Whether the observation filled the page (more may be due)."""
        return self.observed >= self.page_size

    def count(self, action_type: str, outcome: str) -> None:
        """Add one item outcome."""
        self.outcomes[outcome] += 1
        self.by_action.setdefault(action_type, collections.Counter())[outcome] += 1


class RenewalObserver(Protocol):
    """Told the result of every lease renewal (`renewed`, `expired`, `conflict`, `error`)."""

    def __call__(self, result: str) -> None:
        """Record one renewal result."""
        ...


FaultHook = Callable[[str, records.Dispatch], Awaitable[None]]
"""Test-only seam called at each crash point; production wiring (`bootstrap`) passes none.

Points: `after_claim`, `after_inspect` (before the barrier), `after_start`, `after_execute`
(the effect happened, the completion not yet written) and `after_complete`."""


class Dispatcher:
    """Runs bounded batches of approved actions under fenced leases."""

    def __init__(
        self,
        store: ports.ExecutionStore,
        handlers: Mapping[str, ports.ApprovedActionHandler],
        clock: ports.Clock,
        config: DispatchConfig,
        *,
        rng: random.Random | None = None,
        fault_hook: FaultHook | None = None,
        on_renewal: RenewalObserver | None = None,
    ) -> None:
        self._store = store
        self._handlers = dict(handlers)
        self._clock = clock
        self._config = config
        self._rng = rng or random.Random()
        self._fault_hook = fault_hook
        self._on_renewal = on_renewal
        self._draining = anyio.Event()

    def drain(self) -> None:
        """Shutdown: claim nothing more; give back claimed items that have not started."""
        self._draining.set()

    @property
    def draining(self) -> bool:
        """Whether `drain` was called."""
        return self._draining.is_set()

    async def dispatch_batch(self) -> BatchReport:
        """Claim one page of due executions and carry each as far as it may go."""
        config = self._config
        if self.draining:
            return BatchReport(page_size=config.page_size)
        batch = await self._store.claim_due(
            now_ms=self._clock.now_ms(),
            owner=config.owner,
            limit=config.page_size,
            lease_ms=config.lease_ms,
        )
        report = BatchReport(page_size=config.page_size, observed=batch.observed)
        for claim in batch.claims:
            report.claims[claim.outcome.value] += 1
            if claim.outcome is Outcome.CLAIMED:
                log.info(
                    "dispatch.claimed",
                    dispatch_id=claim.dispatch_id,
                    attempt=claim.lease.attempt if claim.lease else None,
                )
            elif claim.outcome is Outcome.EXHAUSTED:
                log.warning("dispatch.exhausted", dispatch_id=claim.dispatch_id)
        queue = collections.deque(batch.claimed)
        await self._prefetch(queue)
        # Taking an item from the queue and renewing the queued ones exclude each other, so a
        # worker never starts with a version the renewal has just made stale.
        queue_lock = anyio.Lock()
        waiting = anyio.CancelScope()
        keeping = anyio.CancelScope()

        async def next_claim() -> records.Claim | None:
            async with queue_lock:
                return queue.popleft() if queue else None

        async def work() -> None:
            while (claim := await next_claim()) is not None:
                assert claim.lease is not None
                assert claim.dispatch is not None
                if self.draining:
                    outcome = await self._yield(claim.lease, claim.dispatch)
                else:
                    outcome = await self._process(claim.lease, claim.dispatch)
                report.count(claim.dispatch.action_type, outcome)

        async def give_back_on_drain() -> None:
            # Claimed items still queued when shutdown begins go back at once, not after the
            # executes in front of them: another replica can take them now.
            with waiting:
                await self._draining.wait()
            if waiting.cancel_called:
                return
            while (claim := await next_claim()) is not None:
                assert claim.lease is not None
                assert claim.dispatch is not None
                outcome = await self._yield(claim.lease, claim.dispatch)
                report.count(claim.dispatch.action_type, outcome)

        async def keep_queued_leases() -> None:
            with keeping:
                while True:
                    await anyio.sleep(config.lease_ms / 3000)
                    async with queue_lock:
                        await self._renew_queued(queue, report)

        async with anyio.create_task_group() as tg:
            tg.start_soon(give_back_on_drain)
            tg.start_soon(keep_queued_leases)
            async with anyio.create_task_group() as workers:
                for _ in range(min(config.concurrency, len(queue))):
                    workers.start_soon(work)
            waiting.cancel()
            keeping.cancel()
        return report

    async def _renew_queued(
        self, queue: collections.deque[records.Claim], report: BatchReport
    ) -> None:
        """Renew every claimed item still waiting for a worker; drop those whose lease is lost.

        A page is claimed at once but executed `concurrency` at a time: without this, items at
        the back of a slow page would reach their start barrier on an expired lease.
        """
        kept: list[records.Claim] = []
        while queue:
            claim = queue.popleft()
            assert claim.lease is not None
            assert claim.dispatch is not None
            try:
                renewal = await self._store.renew(
                    claim.lease, now_ms=self._clock.now_ms(), lease_ms=self._config.lease_ms
                )
            except errors.StoreError as exc:
                # Kept as it is: its start will find out whether the lease still holds.
                log.warning("lease.renew_failed", dispatch_id=claim.dispatch_id, code=exc.code)
                self._observe_renewal("error")
                kept.append(claim)
                continue
            if renewal.lease is None:
                self._observe_renewal(
                    "expired" if renewal.outcome is Outcome.EXPIRED else "conflict"
                )
                log.info(
                    "lease.renew_refused",
                    dispatch_id=claim.dispatch_id,
                    outcome=renewal.outcome.value,
                    reason=renewal.reason,
                )
                report.count(claim.dispatch.action_type, "lease_lost")
                continue
            self._observe_renewal("renewed")
            kept.append(dataclasses.replace(claim, lease=renewal.lease))
        queue.extend(kept)

    async def _prefetch(self, claims: Sequence[records.Claim]) -> None:
        """Let handlers read what the page's inspects need in one go (saves a read per item)."""
        by_type: dict[str, list[records.Dispatch]] = {}
        for claim in claims:
            if claim.dispatch is not None:
                by_type.setdefault(claim.dispatch.action_type, []).append(claim.dispatch)
        for action_type, dispatches in by_type.items():
            handler = self._handlers.get(action_type)
            if isinstance(handler, ports.PrefetchingHandler):
                try:
                    await handler.prefetch(dispatches)
                except errors.StoreError as exc:
                    log.warning("dispatch.prefetch_failed", action_type=action_type, code=exc.code)

    async def _fault(self, point: str, dispatch: records.Dispatch) -> None:
        if self._fault_hook is not None:
            await self._fault_hook(point, dispatch)

    async def _yield(self, lease: records.Lease, dispatch: records.Dispatch) -> str:
        return await self._release(lease, dispatch, states.ReleaseKind.YIELD, "shutdown")

    async def _process(self, lease: records.Lease, dispatch: records.Dispatch) -> str:
        """One claimed item, from inspect to its recorded result; returns the report key."""
        await self._fault("after_claim", dispatch)
        handler = self._handlers.get(dispatch.action_type)
        if handler is None:
            return await self._release(lease, dispatch, states.ReleaseKind.RETRY, "handler_missing")
        try:
            inspected = await handler.inspect(dispatch)
        except Exception as exc:  # inspect is side-effect free: any failure is pre-barrier
            code = exc.code if isinstance(exc, errors.QinglongError) else "inspect_failed"
            inspected = ports.InspectResult(kind=ports.InspectKind.TRANSIENT, code=code)
        await self._fault("after_inspect", dispatch)
        if inspected.kind is ports.InspectKind.TRANSIENT:
            code = inspected.code or "inspect_transient"
            return await self._release(lease, dispatch, states.ReleaseKind.RETRY, code)
        if inspected.kind is ports.InspectKind.BLOCKED:
            code = inspected.code or "inspect_blocked"
            return await self._release(lease, dispatch, states.ReleaseKind.BLOCKED, code)
        if inspected.action_digest != dispatch.action_digest:
            return await self._release(lease, dispatch, states.ReleaseKind.BLOCKED, "digest_drift")
        if self.draining:
            return await self._yield(lease, dispatch)

        identity = await self._start(lease, dispatch)
        if identity is None:
            return "start_refused"
        await self._fault("after_start", dispatch)
        return await self._execute(handler, dispatch, identity)

    async def _start(
        self, lease: records.Lease, dispatch: records.Dispatch
    ) -> records.ExecutionIdentity | None:
        request = records.StartRequest(
            lease=lease,
            approval_request_id=dispatch.approval_request_id,
            action_digest=dispatch.action_digest,
        )
        attempt = 0
        # An unacknowledged start may have committed: replay it under the same fence until the
        # lease is gone (after that the store refuses it anyway), so a committed barrier whose
        # answer was lost is executed by its owner instead of waiting for an operator. The
        # monotonic bound keeps an injected clock that stands still from looping forever.
        give_up_at = time.monotonic() + self._config.lease_ms / 1000
        while self._clock.now_ms() < lease.expires_at_ms and time.monotonic() < give_up_at:
            attempt += 1
            try:
                (result,) = await self._store.start(
                    [request], now_ms=self._clock.now_ms(), lease_ms=self._config.lease_ms
                )
            except errors.StoreError as exc:
                # The commit may or may not have happened: replay under the same fence.
                log.warning(
                    "dispatch.start_unacknowledged",
                    dispatch_id=dispatch.dispatch_id,
                    attempt=lease.attempt,
                    code=exc.code,
                    try_=attempt,
                )
                await anyio.sleep(min(START_REPLAY_MAX_WAIT_S, 0.05 * attempt))
                continue
            if result.identity is not None:
                log.info(
                    "dispatch.started",
                    dispatch_id=dispatch.dispatch_id,
                    attempt=lease.attempt,
                    outcome=result.outcome.value,
                )
                return result.identity
            log.warning(
                "dispatch.start_refused",
                dispatch_id=dispatch.dispatch_id,
                attempt=lease.attempt,
                outcome=result.outcome.value,
                reason=result.reason,
            )
            return None
        return None

    async def _execute(
        self,
        handler: ports.ApprovedActionHandler,
        dispatch: records.Dispatch,
        identity: records.ExecutionIdentity,
    ) -> str:
        config = self._config
        ctx = ports.ExecutionContext(
            dispatch=dispatch,
            identity=identity,
            deadline_ms=self._clock.now_ms() + config.execute_timeout_ms,
        )
        result: ports.ExecuteResult | None = None
        failure = ""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew_while_running, identity.as_lease())
            try:
                with anyio.fail_after(config.execute_timeout_ms / 1000):
                    result = await handler.execute(ctx)
            except TimeoutError:
                failure = "execute_timeout"
            except Exception as exc:  # after the barrier anything unexplained is indeterminate
                failure = exc.code if isinstance(exc, errors.QinglongError) else "execute_raised"
            finally:
                tg.cancel_scope.cancel()
        await self._fault("after_execute", dispatch)
        if result is None:
            log.warning(
                "dispatch.indeterminate",
                dispatch_id=dispatch.dispatch_id,
                attempt=identity.attempt,
                code=failure,
            )
            return await self._complete(
                dispatch, identity, states.Completion.BLOCKED, f"indeterminate:{failure}"[:128]
            )
        if result.kind is ports.ExecuteKind.COMMITTED:
            log.info(
                "dispatch.completed",
                dispatch_id=dispatch.dispatch_id,
                attempt=identity.attempt,
                outcome=result.committed_as.value,
                code=result.code,
            )
            return result.committed_as.value
        completion = (
            states.Completion.SUCCEEDED
            if result.kind is ports.ExecuteKind.SUCCEEDED
            else states.Completion.FAILED
        )
        outcome = await self._complete(dispatch, identity, completion, result.code)
        await self._fault("after_complete", dispatch)
        return outcome

    async def _renew_while_running(self, lease: records.Lease) -> None:
        """Renew at a third of the lease while the execute runs; stop at the first refusal."""
        interval = self._config.lease_ms / 3000
        while True:
            await anyio.sleep(interval)
            try:
                renewal = await self._store.renew(
                    lease, now_ms=self._clock.now_ms(), lease_ms=self._config.lease_ms
                )
            except errors.StoreError as exc:
                log.warning("lease.renew_failed", dispatch_id=lease.dispatch_id, code=exc.code)
                self._observe_renewal("error")
                continue
            self._observe_renewal(
                "renewed"
                if renewal.lease is not None
                else ("expired" if renewal.outcome is Outcome.EXPIRED else "conflict")
            )
            if renewal.lease is None:
                log.info(
                    "lease.renew_refused",
                    dispatch_id=lease.dispatch_id,
                    outcome=renewal.outcome.value,
                    reason=renewal.reason,
                )
                return
            lease = renewal.lease

    def _observe_renewal(self, result: str) -> None:
        if self._on_renewal is not None:
            self._on_renewal(result)

    async def _complete(
        self,
        dispatch: records.Dispatch,
        identity: records.ExecutionIdentity,
        completion: states.Completion,
        code: str,
    ) -> str:
        try:
            done = await self._store.complete(
                identity,
                mutation_id=fencing.mutation_id(dispatch.dispatch_id, identity.attempt, "complete"),
                completion=completion,
                result_code=code,
                now_ms=self._clock.now_ms(),
            )
        except errors.StoreError as exc:
            # Never executed again: the row stays executing and surfaces as recovery_required.
            log.error(
                "dispatch.completion_write_failed",
                dispatch_id=dispatch.dispatch_id,
                attempt=identity.attempt,
                code=exc.code,
            )
            return "completion_write_failed"
        log.info(
            "dispatch.completed",
            dispatch_id=dispatch.dispatch_id,
            attempt=identity.attempt,
            outcome=completion.value if done.outcome is not Outcome.CONFLICT else "conflict",
            code=code,
            reason=done.reason,
        )
        if done.outcome is Outcome.CONFLICT:
            return "completion_conflict"
        return completion.value

    async def _release(
        self,
        lease: records.Lease,
        dispatch: records.Dispatch,
        kind: states.ReleaseKind,
        code: str,
    ) -> str:
        now = self._clock.now_ms()
        retry_at = None
        if kind is states.ReleaseKind.RETRY:
            jitter = self._rng.uniform(0.5, 1.5)
            retry_at = now + states.retry_delay_ms(
                self._config.retry_backoff_ms, lease.attempt, jitter
            )
        try:
            done = await self._store.release_preflight(
                lease,
                mutation_id=fencing.release_mutation_id(lease),
                kind=kind,
                result_code=code,
                retry_at_ms=retry_at,
                now_ms=now,
            )
        except errors.StoreError as exc:
            # Pre-barrier: the lease expires and another claim takes over safely.
            log.warning("dispatch.release_failed", dispatch_id=dispatch.dispatch_id, code=exc.code)
            return "release_failed"
        status = done.status.value if done.status else done.outcome.value
        log.info(
            "dispatch.released",
            dispatch_id=dispatch.dispatch_id,
            attempt=lease.attempt,
            outcome=status,
            code=code,
        )
        return status if done.outcome is not Outcome.CONFLICT else "release_conflict"
