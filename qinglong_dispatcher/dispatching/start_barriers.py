"""Start barriers of concurrent items committed together: one transaction for the ready items
of a page that reach their barrier at about the same time (docs/actions.md).

The dispatcher's workers carry items concurrently (at most `concurrency` at once). Each one
announces an item when it takes it (`arrive`) and either gives it up before its barrier
(`leave`) or asks for its barrier (`start`). A request waits until every announced item has
done one or the other, or at most `max_wait_s`, and then all waiting requests commit in one
`ExecutionStore.start` transaction. Nothing changes for the items: each one executes only
after the transaction that holds its barrier has committed and answered, and a lost answer
(a `StoreError`) reaches every item of the group, each of which replays its own start under
its own fence, exactly as when it was alone. Items never wait for a worker once started: the
group holds only items that have one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import gathering
from qinglong_dispatcher.domain import errors, records

# The dispatcher's logger: the event names and their source stay what operators know.
log = structlog.get_logger("qinglong_dispatcher.dispatcher")

START_REPLAY_MAX_WAIT_S = 0.5
"""Longest pause between replays of an unacknowledged `start` (they go on until the lease ends)."""

MAX_WAIT_S = 0.01
"""Longest a request waits for the other announced items (they are inspecting: reads only)."""


class StartBarriers:
    """Groups the start barriers of concurrent items into one transaction."""

    def __init__(
        self,
        store: ports.ExecutionStore,
        clock: ports.Clock,
        *,
        lease_ms: int,
        max_wait_s: float = MAX_WAIT_S,
    ) -> None:
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._gathering: gathering.Gathering[records.StartRequest, records.StartResult] = (
            gathering.Gathering(self._store_start, max_wait_s=max_wait_s)
        )

    def arrive(self) -> None:
        """A worker took an item that may reach its barrier."""
        self._gathering.arrive()

    def leave(self) -> None:
        """The item will not ask for its barrier (released, given back, or no handler)."""
        self._gathering.leave()

    async def _store_start(
        self, requests: Sequence[records.StartRequest]
    ) -> list[records.StartResult]:
        return await self._store.start(
            requests, now_ms=self._clock.now_ms(), lease_ms=self._lease_ms
        )

    async def begin(
        self, lease: records.Lease, dispatch: records.Dispatch
    ) -> records.ExecutionIdentity | str:
        """The started identity, or the outcome key of a start that did not happen (the
        caller has arrived; this counts as its leaving)."""
        request = records.StartRequest(
            lease=lease,
            approval_request_id=dispatch.approval_request_id,
            action_digest=dispatch.action_digest,
        )
        attempt = 0
        # An unacknowledged start may have committed: replay it under the same fence until the
        # lease is gone (after that the store refuses it anyway), so a committed barrier whose
        # answer was lost is executed by its owner instead of waiting for an operator. The
        # monotonic bound keeps an injected clock that stands still from looping forever. Only
        # the first try joins a group; a replay goes alone.
        give_up_at = time.monotonic() + self._lease_ms / 1000
        while self._clock.now_ms() < lease.expires_at_ms and time.monotonic() < give_up_at:
            attempt += 1
            try:
                if attempt == 1:
                    result = await self._gathering.submit(request)
                else:
                    (result,) = await self._store_start([request])
            except errors.StoreFull as exc:
                # Rolled back for certain, so nothing to replay: the item stays leased and is
                # claimed again after its lease, once there is space (one event, no spinning).
                log.warning(
                    "dispatch.start_failed",
                    dispatch_id=dispatch.dispatch_id,
                    attempt=lease.attempt,
                    code=exc.code,
                )
                return "start_failed"
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
            return "start_refused"
        if attempt == 0:
            self.leave()
        return "start_refused"
