"""The audit export's reads: a horizon probe, and each stream's next rows below a horizon."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import audit_export


class AuditExportStore(Protocol):
    """What the exporter reads; each call is its own read transaction (its own snapshot)."""

    async def audit_export_probe(self) -> audit_export.Probe:
        """Each stream's highest committed id, then the transactions able to write it."""
        ...

    async def audit_export_rows(
        self,
        after: audit_export.Cursor,
        upto: audit_export.Cursor,
        *,
        since_ms: int,
        limit: int,
    ) -> tuple[list[audit_export.Record], list[audit_export.Record]]:
        """The audit records and the ledger lines after `after` and at most `upto`, committed
        at or after `since_ms`, each in id order, at most `limit` of each."""
        ...
