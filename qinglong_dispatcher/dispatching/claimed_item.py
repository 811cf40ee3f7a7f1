"""One claimed item's way through the protocol: inspect, start barrier, execute, then
complete — or, before the barrier, release.

It never executes an item whose start barrier has not committed and never retries after the
barrier: a failed completion write leaves the row `executing`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import anyio
import structlog

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.dispatching import grouped_completions, item_results, start_barriers
from qinglong_dispatcher.dispatching.dispatch_config import DispatchConfig
from qinglong_dispatcher.domain import errors, fencing, records, states
from qinglong_dispatcher.domain.records import Outcome

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")

HANDLER_MISSING_WAIT_MS = 60_000
"""How long a dispatch whose action has no handler here waits (jittered ×0.5–1.5) before it
is looked at again; the attempt is refunded, so it may wait for as long as it takes."""


class RenewalObserver(Protocol):
    """Told the result of every lease renewal (`renewed`, `expired`, `conflict`, `error`)."""

    def __call__(self, result: str) -> None:
        """Record one renewal result."""
        ...


FaultHook = Callable[[str, records.Dispatch], Awaitable[None]]
"""Test-only seam called at each crash point; production wiring (`bootstrap`) passes none.

Points: `after_claim`, `after_inspect` (before the barrier), `after_start`, `after_execute`
(the effect happened, the completion not yet written) and `after_complete`."""


class ItemRunner:
    """Carries one claimed item as far as it may go; shared by a dispatcher's workers."""

    def __init__(
        self,
        store: ports.ExecutionStore,
        handlers: Mapping[str, ports.ApprovedActionHandler],
        clock: ports.Clock,
        config: DispatchConfig,
        *,
        draining: Callable[[], bool],
        rng: random.Random | None = None,
        fault_hook: FaultHook | None = None,
        on_renewal: RenewalObserver | None = None,
    ) -> None:
        self._store = store
        self._handlers = dict(handlers)
        self._clock = clock
        self._config = config
        self._draining = draining
        self._rng = rng or random.Random()
        self._fault_hook = fault_hook
        self._on_renewal = on_renewal
        # The start barriers of items that reach them together commit in one transaction.
        self._barriers = start_barriers.StartBarriers(
            store, clock, lease_ms=config.lease_ms, max_wait_s=config.barrier_wait_s
        )
        # And so do the completions of items that finish together.
        self._completions = grouped_completions.GroupedCompletions(
            store, clock, max_wait_s=config.completion_wait_s
        )

    async def _fault(self, point: str, dispatch: records.Dispatch) -> None:
        if self._fault_hook is not None:
            await self._fault_hook(point, dispatch)

    async def give_back(self, lease: records.Lease, dispatch: records.Dispatch) -> str:
        """Shutdown: back to pending, eligible now, the attempt refunded (`yield`)."""
        return await self._release(lease, dispatch, states.ReleaseKind.YIELD, "shutdown")

    def announce(self, items: int) -> None:
        """`items` workers are about to take their first item each: a start barrier that
        comes first waits (boundedly) for theirs instead of committing alone."""
        for _ in range(items):
            self._barriers.arrive()

    def withdraw(self) -> None:
        """An announced worker took no item to `process` after all."""
        self._barriers.leave()

    async def process(
        self,
        lease: records.Lease,
        dispatch: records.Dispatch,
        *,
        announced: bool = False,
        taken_over: bool = False,
    ) -> str:
        """From inspect to the recorded result; returns the report key (`announced`: this
        item's worker was announced, so the item has arrived already; `taken_over`: the claim
        replaced another owner's expired lease); one `dispatch.claim` span covers it."""
        with tracing.claim_span(dispatch, lease, taken_over=taken_over) as span:
            outcome = await self._process(lease, dispatch, announced=announced)
            span.set("qinglong.outcome", outcome)
            return outcome

    async def _process(
        self, lease: records.Lease, dispatch: records.Dispatch, *, announced: bool
    ) -> str:
        if not announced:
            self._barriers.arrive()
        try:
            handler = await self._until_barrier(lease, dispatch)
        except BaseException:
            self._barriers.leave()
            raise
        if isinstance(handler, str):
            self._barriers.leave()
            return handler
        # Announced to the completions from its barrier on: the items of a barrier group go on
        # together, so the first to finish waits (boundedly) for the others.
        with self._completions.executing() as ticket:
            with tracing.current().span("dispatch.start_barrier") as span:
                identity = await self._barriers.begin(lease, dispatch)
                span.set("qinglong.outcome", identity if isinstance(identity, str) else "started")
            if isinstance(identity, str):
                return identity
            await self._fault("after_start", dispatch)
            return await self._execute(handler, dispatch, identity, ticket)

    async def _until_barrier(
        self, lease: records.Lease, dispatch: records.Dispatch
    ) -> ports.ApprovedActionHandler | str:
        """Inspect: the handler of an item ready for its barrier, or the report key of a claim
        given back before it."""
        await self._fault("after_claim", dispatch)
        handler = self._handlers.get(dispatch.action_type)
        if handler is None:
            # Not installed (or not configured) in this process: nothing ran, so the claim's
            # attempt is refunded and the dispatch waits for a process that has the action.
            log.warning(
                "dispatch.handler_missing",
                dispatch_id=dispatch.dispatch_id,
                action_type=dispatch.action_type,
                attempt=lease.attempt,
            )
            return await self._release(lease, dispatch, states.ReleaseKind.WAIT, "handler_missing")
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
        if self._draining():
            return await self.give_back(lease, dispatch)
        return handler

    async def _execute(
        self,
        handler: ports.ApprovedActionHandler,
        dispatch: records.Dispatch,
        identity: records.ExecutionIdentity,
        ticket: grouped_completions.Ticket,
    ) -> str:
        config = self._config
        result: ports.ExecuteResult | None = None
        failure = ""
        with tracing.current().span("dispatch.execute") as span:
            ctx = ports.ExecutionContext(
                dispatch=dispatch,
                identity=identity,
                deadline_ms=self._clock.now_ms() + config.execute_timeout_ms,
                traceparent=tracing.effect_traceparent(span, dispatch.traceparent),
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._renew_while_running, identity.as_lease())
                try:
                    with anyio.fail_after(config.execute_timeout_ms / 1000):
                        result = await handler.execute(ctx)
                except TimeoutError:
                    failure = "execute_timeout"
                except Exception as exc:  # after the barrier anything unexplained is indeterminate
                    failure = (
                        exc.code if isinstance(exc, errors.QinglongError) else "execute_raised"
                    )
                finally:
                    tg.cancel_scope.cancel()
            span.set("qinglong.outcome", failure or (result.kind.value if result else None))
        await self._fault("after_execute", dispatch)
        if result is None:
            log.warning(
                "dispatch.indeterminate",
                dispatch_id=dispatch.dispatch_id,
                attempt=identity.attempt,
                code=failure,
            )
            return await self._complete(
                ticket,
                dispatch,
                identity,
                states.Completion.BLOCKED,
                f"indeterminate:{failure}"[:128],
            )
        if result.kind is ports.ExecuteKind.UNCERTAIN:
            # Nothing is written and the renewals have stopped: the lease runs out, the row is
            # recovery_required, and only evidence or an operator settles it — never a retry.
            log.warning(
                "dispatch.uncertain",
                dispatch_id=dispatch.dispatch_id,
                attempt=identity.attempt,
                code=result.code,
            )
            await item_results.keep_uncertain(self._store, identity, result)
            return "uncertain"
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
        receipt = item_results.receipt_of(dispatch, result)
        outcome = await self._complete(ticket, dispatch, identity, completion, result.code, receipt)
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
                self.observe_renewal("error")
                continue
            self.observe_renewal(
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

    def observe_renewal(self, result: str) -> None:
        if self._on_renewal is not None:
            self._on_renewal(result)

    async def _complete(
        self,
        ticket: grouped_completions.Ticket,
        dispatch: records.Dispatch,
        identity: records.ExecutionIdentity,
        completion: states.Completion,
        code: str,
        receipt: records.ActionReceipt | None = None,
    ) -> str:
        with tracing.current().span(
            "dispatch.completion", attributes={"qinglong.completion": completion.value}
        ) as span:
            outcome = await self._write_completion(
                ticket, dispatch, identity, completion, code, receipt
            )
            span.set("qinglong.outcome", outcome)
            return outcome

    async def _write_completion(
        self,
        ticket: grouped_completions.Ticket,
        dispatch: records.Dispatch,
        identity: records.ExecutionIdentity,
        completion: states.Completion,
        code: str,
        receipt: records.ActionReceipt | None,
    ) -> str:
        try:
            done = await ticket.complete(
                ports.CompletionRequest(
                    identity=identity,
                    mutation_id=fencing.mutation_id(
                        dispatch.dispatch_id, identity.attempt, "complete"
                    ),
                    completion=completion,
                    result_code=code,
                    receipt=receipt,
                )
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
        elif kind is states.ReleaseKind.WAIT:
            retry_at = now + int(HANDLER_MISSING_WAIT_MS * self._rng.uniform(0.5, 1.5))
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
