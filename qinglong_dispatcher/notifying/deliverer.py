"""The webhook deliverer: a side service of the daemon that holds the cluster's one delivery
lease, matches new outbox events against the subscriptions and posts each delivery due,
signed per Standard Webhooks, recording every attempt (docs/notifications.md#delivery).

At least once: a delivery is recorded only after its answer, so a deliverer killed between
the two sends it again, with the same `webhook-id`, once its lease runs out. A subject's
events go out in order per subscription (the store hands out only the earliest pending one).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import anyio
import structlog

from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.ports import notifications as ports

if TYPE_CHECKING:
    import aiohttp

    from qinglong_dispatcher.notifying.sending import Sent

log = structlog.get_logger("qinglong_dispatcher.notify")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """How the deliverer paces itself."""

    poll_s: float = 1.0
    idle_poll_s: float = 5.0
    """The wait doubles from `poll_s` up to this while passes find nothing to match or send:
    an idle edge daemon reads its file a few times a minute, not every second."""
    lease_ms: int = 15_000
    max_attempts: int = 8
    """Attempts of one delivery before it is dead-lettered."""
    backoff_base_ms: int = 1_000
    backoff_cap_ms: int = 300_000
    timeout_s: float = 10.0
    batch: int = 64
    settle_ms: int = 60_000
    """Events older than this are taken as committed in order (the fan-out's watermark)."""


class Deliverer:
    """`lifecycle.daemon.Service`: started with the daemon, served in its task group."""

    def __init__(
        self,
        store: ports.NotificationStore,
        *,
        owner: str,
        timing: Timing | None = None,
        ui_base: str | None = None,
        environ: Mapping[str, str] | None = None,
        jitter: Callable[[], float] = random.random,
        wall_s: Callable[[], float] = time.time,
        observe: ports.DeliveryObserver | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.timing = timing or Timing()
        self.ui_base = ui_base
        self.environ = environ
        self._jitter = jitter
        self._wall_s = wall_s
        self._observe = observe
        self._session: aiohttp.ClientSession | None = None
        self._started = False
        self._matched = 0
        """Events the last pass matched."""

    async def start(self) -> None:
        """Nothing to open yet: the HTTP client (and aiohttp) waits for the first post, so an
        edge daemon with no subscription never imports it."""
        self._started = True

    async def serve(self, stop: anyio.Event) -> None:
        """Deliver until `stop`; a store fault is logged and the next poll tries again."""
        await self.start()
        wait = self.timing.poll_s
        while not stop.is_set():
            try:
                busy = await self.tick() > 0 or self._matched > 0
            except errors.StoreError as exc:
                log.warning("notify.store_unavailable", code=exc.code)
                busy = False
            wait = self.timing.poll_s if busy else min(wait * 2, self.timing.idle_poll_s)
            with anyio.move_on_after(wait):
                await stop.wait()

    async def aclose(self) -> None:
        """Give the lease up and close the client; safe to call twice."""
        started, self._started = self._started, False
        session, self._session = self._session, None
        if started:
            try:
                await self.store.release_deliverer(self.owner)
            except errors.StoreError as exc:
                log.warning("notify.release_failed", code=exc.code)
        if session is not None:
            await session.close()

    async def tick(self) -> int:
        """One pass: hold the lease, match new events, post what is due; the attempts made."""
        self._matched = 0
        # Nobody subscribed: nothing to match or send, and no lease to write (an idle edge
        # daemon then only reads the small subscriptions table each poll).
        if not await self.store.list_subscriptions():
            return 0
        if not await self.store.claim_deliverer(self.owner, self.timing.lease_ms):
            return 0
        kinds = await self.store.fan_out(
            self.owner, limit=self.timing.batch, settle_ms=self.timing.settle_ms
        )
        self._matched = len(kinds)
        due = await self.store.due_deliveries(self.owner, limit=self.timing.batch)
        made = 0
        for one in due:
            made += await self.attempt(one)
        if self._observe is not None:
            for kind in kinds:
                self._observe.written(kind)
            self._observe.stats(await self.store.delivery_stats())
        return made

    async def attempt(self, due: ports.Due) -> int:
        """Post one delivery and record its outcome; 1 if recorded."""
        sent = await self.post(due)
        delivered = sent.code is not None and 200 <= sent.code < 300
        attempts = due.attempts + 1
        dead = not delivered and attempts >= self.timing.max_attempts
        status = "delivered" if delivered else "dead" if dead else "pending"
        delay = 0
        if status == "pending":
            delay = n.backoff_ms(
                attempts,
                base_ms=self.timing.backoff_base_ms,
                cap_ms=self.timing.backoff_cap_ms,
                jitter=0.5 + self._jitter() / 2,
            )
        outcome = ports.Attempt(
            due=due,
            status=status,
            outcome="delivered" if delivered else "dead" if dead else "failed",
            code=sent.code,
            error_code=sent.error_code,
            latency_ms=sent.latency_ms,
            delay_ms=delay,
        )
        recorded = await self.store.record_attempt(self.owner, outcome)
        log.info(
            "notify.attempt",
            event_id=due.event.id,
            kind=due.event.kind,
            subscription=due.subscription.name,
            attempt=attempts,
            outcome=outcome.outcome,
            code=sent.code,
            error=sent.error_code,
            recorded=recorded,
        )
        if recorded and self._observe is not None:
            self._observe.attempted(outcome)
        return int(recorded)

    async def post(self, due: ports.Due) -> Sent:
        """Sign and post `due`'s event; never raises for the receiver's sake."""
        from qinglong_dispatcher.notifying import sending  # aiohttp: on the first post only

        started = time.monotonic()
        try:
            key = n.webhook_key(
                secrets.SecretRef.parse(due.subscription.secret_ref).read(self.environ)
            )
        except (ValueError, secrets.SecretUnavailable, n.SubscriptionInvalid):
            log.warning(
                "notify.secret_unavailable",
                subscription=due.subscription.name,
                ref=due.subscription.secret_ref,
            )
            return sending.Sent(None, "secret_unavailable", 0)
        return await sending.send(
            self._client(),
            due.subscription.url,
            key,
            due.event,
            due.subscription.format,
            timestamp_s=int(self._wall_s()),
            ui_base=self.ui_base,
            started=started,
        )

    def _client(self) -> aiohttp.ClientSession:
        from qinglong_dispatcher.notifying import sending

        if self._session is None:
            self._session = sending.client(self.timing.timeout_s)
        return self._session
