"""`http.request`: send one approved HTTP request to a configured receiver, at most once.

- `plan`: `HttpRequestPlan` — a receiver's name, the method, a plain path, the query, the
  headers and the body bytes, all bound by the approval's digest; never a URL or a secret;
- `settings`: its own, `QINGLONG_RECEIVERS_FILE` (none: the action has no handler);
- `receivers`: the operator's receivers (`[receivers.NAME]` in a TOML file): origin,
  methods, path prefixes, CA, timeouts, secrets by reference, the receiver's idempotency
  contract;
- `request`: the exact request built from both (pure), and the classified outcome types;
- `send`: the aiohttp client, one session per receiver, one request per send — the only
  module importing aiohttp, and imported only by `build`;
- `handler`: inspect builds the request offline; execute sends it keyed on the dispatch id,
  resends only what cannot be delivered twice, and answers `uncertain` for anything it
  cannot prove;
- `evidence`: asks the receiver about the key (`get` or `replay`) within its retention,
  otherwise leaves the dispatch to an operator (`manual_only`).

See `docs/actions.md`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.http_request import plan, settings

if TYPE_CHECKING:
    from qinglong_dispatcher.actions.http_request import evidence, handler, receivers, send

ACTION_TYPE = plan.ACTION_TYPE


def build(
    receivers: receivers.ReceiverSet,
    plans: contract.PlanReader,
    clock: ports.Clock,
) -> tuple[handler.HttpRequestHandler, evidence.HttpRequestEvidence, send.Sender]:
    """The handler, the evidence provider and the sender they share (close it at shutdown
    with `await sender.aclose()`). No I/O: sessions open at the first send."""
    # Imported here: aiohttp is loaded only by a process that has receivers to send to.
    from qinglong_dispatcher.actions.http_request import evidence, handler, send

    sender = send.Sender()
    return (
        handler.HttpRequestHandler(plans, receivers, sender, clock),
        evidence.HttpRequestEvidence(plans, receivers, sender, clock),
        sender,
    )


def _receivers(ctx: contract.BuiltInContext) -> receivers.ReceiverSet | None:
    # Read at startup: a broken file is a configuration error (exit 78), not a dead dispatch.
    path = ctx.settings_of(settings.HttpRequestSettings).receivers_file
    if path is None:
        return None
    from qinglong_dispatcher.actions.http_request import receivers

    loaded = receivers.load(path)
    loaded.require_within(ctx.execute_timeout_s)
    return loaded


ACTION = contract.configured_spec(
    plan_model=plan.HttpRequestPlan,
    settings=settings.HttpRequestSettings,
    load=_receivers,
    # Each side its own sender: the executes' connections apart from recovery's lookups.
    handler=lambda config, plans, clock: build(config, plans, clock)[0],
    evidence=lambda config, plans, clock: build(config, plans, clock)[1],
    unconfigured="receivers_unconfigured",
)
