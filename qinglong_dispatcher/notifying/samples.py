"""The signed sample `notify test` and `POST /api/v1/subscriptions/{name}/test` send: one
request of no real action, signed with the subscription's secret exactly as a delivery is,
posted to its destination and recorded nowhere (docs/notifications.md#testing-a-subscription).
"""

from __future__ import annotations

import secrets as random_ids
import time
from collections.abc import Mapping

from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.ports import notifications as ports

TIMEOUT_S = 10.0
"""How long a sample waits for its answer."""


def sample(name: str) -> n.Event:
    """The event a test posts: a request of no real action, with its own message id."""
    return n.Event(
        id=0,
        kind="approval.requested",
        subject_id="a-sample",
        project_id="sample",
        action_type="sample",
        at_ms=int(time.time() * 1000),
        payload={"approvalRequestId": "a-sample", "sample": True, "subscription": name},
        message=f"qle_test_{random_ids.token_hex(8)}",
    )


def key_of(sub: n.Subscription, environ: Mapping[str, str] | None = None) -> bytes:
    """The signing key `sub`'s secret reference names, read in this process (`environ`: its
    environment by default); `ValueError`, `SecretUnavailable` or `SubscriptionInvalid`."""
    return n.webhook_key(secrets.SecretRef.parse(sub.secret_ref).read(environ))


async def post(
    sub: n.Subscription, key: bytes, *, ui_base: str | None, timeout_s: float = TIMEOUT_S
) -> ports.Tested:
    """Post one signed sample to `sub`'s destination with `key`; what it came back with."""
    from qinglong_dispatcher.notifying import sending  # aiohttp: on the first test only

    event = sample(sub.name)
    async with sending.client(timeout_s) as session:
        sent = await sending.send(
            session, sub.url, key, event, sub.format, timestamp_s=int(time.time()), ui_base=ui_base
        )
    return ports.Tested(
        webhook_id=event.message_id,
        code=sent.code,
        error_code=sent.error_code,
        latency_ms=sent.latency_ms,
    )


class Samples:
    """`ports.SampleSender` of the API and the UI: the secret is read in the daemon's own
    environment, as the deliverer reads it; one it cannot read is the result
    `secret_unavailable` (the deliverer's attempt records the same code)."""

    def __init__(
        self,
        *,
        ui_base: str | None = None,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.ui_base = ui_base
        self.environ = environ
        self.timeout_s = timeout_s

    async def send_sample(self, subscription: n.Subscription) -> ports.Tested:
        """One signed sample to `subscription`'s destination; never raises for its sake."""
        try:
            key = key_of(subscription, self.environ)
        except (ValueError, secrets.SecretUnavailable, n.SubscriptionInvalid):
            return ports.Tested(
                webhook_id=sample(subscription.name).message_id,
                code=None,
                error_code="secret_unavailable",
                latency_ms=0,
            )
        return await post(subscription, key, ui_base=self.ui_base, timeout_s=self.timeout_s)
