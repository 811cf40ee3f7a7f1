"""The `http.request` evidence provider: what the receiver itself says about the dispatch's key.

Only a receiver that keeps its keys can answer, and only while it still keeps this one
(`now < started_at + key_retention_seconds`); otherwise, or without a lookup, the answer is
`missing` with reason `manual_only` and an operator decides. The lookups:

- `get`: `GET lookup_path` with the key. 200 whose JSON `status` is `completed` is
  `verified_succeeded`; a 404 is `missing` (`lookup_missing`); 409, or a 200 whose status is
  `in_flight`, `pending`, `processing` or `in_progress`, is `missing` (`lookup_in_flight`).
- `replay`: the exact approved bytes again under the same key. Configuration allows it only
  for a receiver that dedupes per key, which answers a same-key resend from its store and
  cannot perform the effect twice: a 2xx is `verified_succeeded`, a 422 (the key was used
  for other bytes) is `conflict` (`key_reused`).

Anything else, a network failure or an unreadable secret raises: the reconciler records
`unavailable`, never `missing`. This module never imports the handler.
"""

from __future__ import annotations

import json
from typing import Final

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.actions.http_request import receivers as receiver_config
from qinglong_dispatcher.actions.http_request import request as http
from qinglong_dispatcher.domain import digests, errors, recovery

ACTION_TYPE: Final = plan_model.ACTION_TYPE
EVIDENCE_TAG: Final = "qinglong/http.request/evidence@v1"
Kind = recovery.EvidenceKind
_COMPLETED: Final = "completed"
_IN_FLIGHT: Final = frozenset({"in_flight", "pending", "processing", "in_progress"})


class LookupUnavailable(errors.QinglongError):
    """The receiver could not say what became of the key (a low-sensitivity `code` says why)."""

    code = "lookup_unavailable"


class HttpRequestEvidence:
    """Implements `ports.EvidenceProvider` for `http.request`."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        receivers: receiver_config.ReceiverSet,
        sender: http.Sender,
        clock: ports.Clock,
    ) -> None:
        self._plans = plans
        self._receivers = receivers
        self._sender = sender
        self._clock = clock

    async def aclose(self) -> None:
        """Close the sender's connections (`ports.Closable`)."""
        await self._sender.aclose()

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """Ask the receiver about the dispatch's key (see the module docstring)."""
        dispatch = snapshot.dispatch
        try:
            plan = await self._plans.approved(dispatch, plan_model.HttpRequestPlan)
        except errors.PlanInvalid as exc:
            return recovery.Evidence(kind=Kind.CONFLICT, reason=exc.code)
        receiver = self._receivers.get(plan.receiver)
        if receiver is None:
            raise LookupUnavailable(
                "the plan's receiver is not configured", code="receiver_unknown"
            )
        policy = receiver.idempotency
        started = snapshot.execution.started_at_ms
        if (
            policy.lookup == "none"
            or started is None
            or self._clock.now_ms() >= started + policy.key_retention_seconds * 1000
        ):
            return recovery.Evidence(kind=Kind.MISSING, reason=recovery.MANUAL_ONLY)
        key = dispatch.dispatch_id
        credentials = http.read_credentials(receiver)  # unreadable: raises, i.e. unavailable
        if policy.lookup == "get":
            prepared = http.lookup_request(receiver, idempotency_key=key, credentials=credentials)
            outcome = await self._sender.send(receiver, prepared, keep_body=True)
            return self._looked_up(snapshot, receiver, outcome)
        prepared = http.build(
            receiver,
            plan,
            idempotency_key=key,
            credentials=credentials,
            now_s=self._clock.now_ms() // 1000,
        )
        outcome = await self._sender.send(receiver, prepared)
        if outcome.kind is http.OutcomeKind.ACCEPTED:
            return self._verified(snapshot, receiver, outcome)
        if outcome.status == 422:
            return recovery.Evidence(kind=Kind.CONFLICT, reason="key_reused")
        raise LookupUnavailable("the replay proved nothing", code=f"replay_{outcome.code}"[:128])

    def _looked_up(
        self,
        snapshot: recovery.Snapshot,
        receiver: receiver_config.Receiver,
        outcome: http.Outcome,
    ) -> recovery.Evidence:
        if outcome.status == 404 and outcome.kind is not http.OutcomeKind.NOT_SENT:
            return recovery.Evidence(kind=Kind.MISSING, reason="lookup_missing")
        if outcome.kind is http.OutcomeKind.IN_FLIGHT:
            return recovery.Evidence(kind=Kind.MISSING, reason="lookup_in_flight")
        if outcome.kind is not http.OutcomeKind.ACCEPTED or outcome.status != 200:
            raise LookupUnavailable("the lookup failed", code=f"lookup_{outcome.code}"[:128])
        state = _state_of(outcome.body or b"")
        if state == _COMPLETED:
            return self._verified(snapshot, receiver, outcome)
        if state in _IN_FLIGHT:
            return recovery.Evidence(kind=Kind.MISSING, reason="lookup_in_flight")
        raise LookupUnavailable("the lookup answered no known state", code="lookup_unrecognised")

    def _verified(
        self,
        snapshot: recovery.Snapshot,
        receiver: receiver_config.Receiver,
        outcome: http.Outcome,
    ) -> recovery.Evidence:
        return recovery.Evidence(
            kind=Kind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                EVIDENCE_TAG,
                {
                    "idempotencyKey": snapshot.dispatch.dispatch_id,
                    "actionDigest": snapshot.dispatch.action_digest,
                    "receiver": receiver.name,
                    "lookup": receiver.idempotency.lookup,
                    "status": outcome.status,
                    "bodyDigest": outcome.body_digest,
                },
            ),
        )


def _state_of(body: bytes) -> str | None:
    """The `status` member of a JSON object body, or None."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # a receiver's answer nested past the parser's stack
        return None
    state = value.get("status") if isinstance(value, dict) else None
    return state if isinstance(state, str) else None
