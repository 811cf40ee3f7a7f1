"""The gauges a reconcile pass reads from the store: waiting approvals by policy, held and
busy targets, and dispatches a freeze holds.

Every replica reports them alike (each is a read of the database, like the backlog's), so a
failed read only leaves the last value and logs its code; it never stops the pass.
"""

from __future__ import annotations

import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.lifecycle import metrics

log = structlog.get_logger("qinglong_dispatcher.daemon")


async def read(store: ports.Store, clock: ports.Clock, the_metrics: metrics.Metrics) -> None:
    """Set each gauge from one read of the store."""
    try:
        the_metrics.approvals.set_waiting(await store.waiting_by_policy())
    except errors.StoreError as exc:
        log.warning("approvals.waiting_read_failed", code=exc.code)
    try:
        the_metrics.targets.set_holders(await store.target_holders(now_ms=clock.now_ms()))
    except errors.StoreError as exc:
        log.warning("targets.holders_read_failed", code=exc.code)
    try:
        the_metrics.targets.set_frozen(await store.count_frozen())
    except errors.StoreError as exc:
        log.warning("freezes.frozen_read_failed", code=exc.code)
