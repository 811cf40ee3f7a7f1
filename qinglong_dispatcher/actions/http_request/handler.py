"""The `http.request` handler: inspect builds the request offline; execute sends it once.

`inspect` resolves the plan and builds the exact request against its receiver (no network):
a plan the receiver would refuse is `BLOCKED` before the barrier, and a secret that cannot
be read now is `TRANSIENT` (a rotation in progress should not block approved work).

`execute` sends only what was approved, keyed on the dispatch id, and answers with what the
answer proves. It resends only where a resend cannot do the effect twice: after `NOT_SENT`
(nothing was delivered) and, for a receiver that dedupes per key, after a 409 (the same
bytes under the same key are answered from the receiver's store). Each resend must fit
whole before the execute deadline (a send cut off by the dispatcher could only end
indeterminate). Everything else after a possible delivery is `UNCERTAIN`: the dispatcher
leaves the row to recovery, which asks `evidence`, never this handler.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract, secrets
from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.actions.http_request import receivers as receiver_config
from qinglong_dispatcher.actions.http_request import request as http
from qinglong_dispatcher.domain import errors, records

log = structlog.get_logger("qinglong_dispatcher.actions.http_request.handler")

ACTION_TYPE = plan_model.ACTION_TYPE
RESEND_FIRST_S = 0.05
RESEND_MAX_S = 1.0
Kind = http.OutcomeKind


def lost_track(receiver: str, outcome: http.Outcome, sends: int) -> dict[str, object]:
    """What an uncertain send leaves for the operator: the receiver's name, the status or the
    transport error, how far the request got and how many sends there were — codes only,
    never a header, a URL or a body."""
    if outcome.kind is Kind.IN_FLIGHT:
        reached = "the receiver answered that a request with this key is in progress"
    elif outcome.status is not None:
        reached = "the receiver answered; the answer proves neither success nor failure"
    else:
        reached = "connected: the request may have been delivered; no complete answer came back"
    return {
        "receiver": receiver,
        "status": outcome.status,
        "error": None if outcome.status is not None else outcome.code,
        "reached": reached,
        "sends": sends,
    }


def _uncertain(code: str, evidence: dict[str, object]) -> ports.ExecuteResult:
    return ports.ExecuteResult(kind=ports.ExecuteKind.UNCERTAIN, code=code, evidence=evidence)


class HttpRequestHandler:
    """Implements `ports.ApprovedActionHandler` for `http.request`."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        receivers: receiver_config.ReceiverSet,
        sender: http.Sender,
        clock: ports.Clock,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._plans = plans
        self._receivers = receivers
        self._sender = sender
        self._clock = clock
        self._rng = rng or random.Random()

    async def aclose(self) -> None:
        """Close the sender's connections (`ports.Closable`)."""
        await self._sender.aclose()

    def _prepare(
        self, plan: plan_model.HttpRequestPlan, key: str, traceparent: str | None = None
    ) -> tuple[receiver_config.Receiver, http.PreparedRequest]:
        receiver = http.receiver_for(self._receivers, plan.receiver)
        prepared = http.build(
            receiver,
            plan,
            idempotency_key=key,
            credentials=http.read_credentials(receiver),
            now_s=self._clock.now_ms() // 1000,
        )
        if traceparent is not None and "traceparent" not in prepared.header_names:
            # The receiver joins the dispatch's trace (W3C trace context); a plan that names
            # its own traceparent keeps it.
            prepared = dataclasses.replace(
                prepared, headers=(*prepared.headers, ("traceparent", traceparent))
            )
        return receiver, prepared

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """A page's plans in one read (`ports.PrefetchingHandler`)."""
        await self._plans.prefetch(dispatches)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """Plan and receiver checks and the request built offline; no network."""
        blocked = ports.InspectKind.BLOCKED
        try:
            plan, digest = await self._plans.resolve(dispatch, plan_model.HttpRequestPlan)
            self._prepare(plan, dispatch.dispatch_id)
        except (errors.InvalidInput, http.RequestRefused, http.SecretInvalid) as exc:
            return ports.InspectResult(kind=blocked, code=exc.code)
        except secrets.SecretUnavailable as exc:
            return ports.InspectResult(kind=ports.InspectKind.TRANSIENT, code=exc.code)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Send the approved request under the dispatch's key; see the module docstring."""
        failed = ports.ExecuteKind.FAILED
        try:
            plan = await self._plans.approved(ctx.dispatch, plan_model.HttpRequestPlan)
            receiver, prepared = self._prepare(plan, ctx.idempotency_key, ctx.traceparent)
        except (
            errors.InvalidInput,
            http.RequestRefused,
            http.SecretInvalid,
            secrets.SecretUnavailable,
        ) as exc:
            return ports.ExecuteResult(kind=failed, code=exc.code)  # nothing was sent
        # Two clocks bound the resends: the dispatcher's deadline on the injected clock, and
        # the same budget in monotonic time (an injected clock need not move by itself).
        end = anyio.current_time() + max(0.0, (ctx.deadline_ms - self._clock.now_ms()) / 1000)
        in_flight_until: float | None = None
        delivered = False
        pause = RESEND_FIRST_S
        sends = 0
        while True:
            outcome = await self._sender.send(receiver, prepared)
            sends += 1
            log.info(
                "http_request.sent",
                dispatch_id=ctx.dispatch.dispatch_id,
                receiver=receiver.name,
                outcome=outcome.kind.value,
                code=outcome.code,
            )
            if outcome.kind is Kind.ACCEPTED:
                return ports.ExecuteResult(
                    kind=ports.ExecuteKind.SUCCEEDED,
                    code=outcome.code,
                    receipt=outcome.receipt(receiver.name),
                )
            if outcome.kind is Kind.REFUSED:
                return ports.ExecuteResult(
                    kind=failed, code=outcome.code, receipt=outcome.receipt(receiver.name)
                )
            if outcome.kind is Kind.UNCERTAIN:
                return _uncertain(outcome.code, lost_track(receiver.name, outcome, sends))
            wait = pause * self._rng.uniform(0.5, 1.5)
            if outcome.kind is Kind.IN_FLIGHT:
                delivered = True
                if not receiver.idempotency.dedupes:
                    # Without a per-key store a resend might run the effect a second time.
                    return _uncertain("in_flight", lost_track(receiver.name, outcome, sends))
                now = anyio.current_time()
                if in_flight_until is None:
                    # The receiver's own timeout bounds how long we wait for its work;
                    # Retry-After may shorten the pause, never stretch it past that bound.
                    in_flight_until = now + receiver.total_timeout_s
                if outcome.retry_after_s is not None:
                    wait = min(outcome.retry_after_s, receiver.total_timeout_s)
                if now + wait > in_flight_until:
                    return _uncertain("in_flight", lost_track(receiver.name, outcome, sends))
            if not self._room(ctx, end, wait, receiver):
                if delivered:
                    return _uncertain("in_flight", lost_track(receiver.name, outcome, sends))
                return ports.ExecuteResult(kind=failed, code="http_not_sent")
            await anyio.sleep(wait)
            pause = min(RESEND_MAX_S, pause * 2)
            try:
                # Rebuilt for a fresh webhook timestamp and the secrets as they are now; the
                # method, URL, plan headers, key and body bytes are the same.
                receiver, prepared = self._prepare(plan, ctx.idempotency_key, ctx.traceparent)
            except (http.RequestRefused, http.SecretInvalid, secrets.SecretUnavailable) as exc:
                if delivered:
                    return _uncertain("in_flight", lost_track(receiver.name, outcome, sends))
                return ports.ExecuteResult(kind=failed, code=exc.code)

    def _room(
        self,
        ctx: ports.ExecutionContext,
        end: float,
        wait: float,
        receiver: receiver_config.Receiver,
    ) -> bool:
        """Whether a pause of `wait` and then a whole send still end before the deadline."""
        need = wait + receiver.total_timeout_s
        return (
            anyio.current_time() + need < end
            and self._clock.now_ms() + need * 1000 < ctx.deadline_ms
        )
