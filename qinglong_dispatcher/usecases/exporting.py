"""Export the audit trail: pages of records below the commit horizon, once, or following.

The CLI (`audit export`) and the API (`GET /api/v1/audit/export`) both read through here, so
both stop at the same horizon (`domain.audit_export.Horizon`) and print the same cursor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator

import anyio

from qinglong_dispatcher import ports
from qinglong_dispatcher.domain import audit_export

SETTLE_POLL_S = 0.05
"""How often a one-off export looks again while writers it saw are still in progress."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Export:
    """What to export: from `after`, records committed at or after `since_ms`."""

    after: audit_export.Cursor = dataclasses.field(default_factory=audit_export.Cursor)
    since_ms: int = 0
    page_size: int = 500
    follow: bool = False
    poll_s: float = 1.0
    """`follow`: how long to wait between looks for new commits."""
    settle_s: float = 10.0
    """Not following: how long to wait for writers in progress at the start to end; past it
    the export stops at the horizon it reached (the cursor says where to resume)."""


async def pages(
    store: ports.AuditExportStore, export: Export, stop: anyio.Event | None = None
) -> AsyncGenerator[audit_export.Page]:
    """Every page of records after `export.after` up to the horizon, in export order.

    Not following, it ends once the horizon covers what its first look saw committed (or
    `settle_s` ran out); following, it looks again every `poll_s` until `stop` is set. A page
    is only yielded once every row before it is final, so the cursor after any yielded page is
    a safe place to resume from."""
    # Rows at or below a cursor an export printed were final when it printed it.
    horizon = audit_export.Horizon(export.after)
    position = export.after
    target: audit_export.Cursor | None = None
    deadline = anyio.current_time() + export.settle_s
    while stop is None or not stop.is_set():
        probe = await store.audit_export_probe()
        if target is None:
            target = audit_export.Cursor(probe.audit_max, probe.ledger_max)
        safe = horizon.observe(probe)
        async for page in _below(store, position, safe, export):
            position = page.after
            yield page
            if stop is not None and stop.is_set():
                return
        if not export.follow and (safe.covers(target) or anyio.current_time() >= deadline):
            return
        wait = export.poll_s if export.follow else SETTLE_POLL_S
        if stop is None:
            await anyio.sleep(wait)
        else:
            with anyio.move_on_after(wait):
                await stop.wait()


async def _below(
    store: ports.AuditExportStore,
    position: audit_export.Cursor,
    safe: audit_export.Cursor,
    export: Export,
) -> AsyncIterator[audit_export.Page]:
    """The pages between `position` and `safe`, until both streams are read up to it."""
    limit = export.page_size
    while True:
        audits, ledgers = await store.audit_export_rows(
            position, safe, since_ms=export.since_ms, limit=limit
        )
        page = audit_export.merge(position, audits, ledgers, limit=limit)
        if page.records:
            yield page
            position = page.after
        read_all = len(page.records) == len(audits) + len(ledgers)
        if read_all and len(audits) < limit and len(ledgers) < limit:
            return
