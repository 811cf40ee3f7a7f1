"""The prune store: finished dispatch trees and old audit rows, under permits."""

from __future__ import annotations

from typing import Protocol

from qinglong_dispatcher.domain import (
    retention,
)


class PruneStore(Protocol):
    """Retention: deleting finished dispatch trees and old audit records (migration 0009)."""

    async def prune_batch(
        self, *, cutoff_ms: int, audit_cutoff_ms: int, limit: int, dry_run: bool = False
    ) -> retention.PruneCounts:
        """One transaction: up to `limit` terminal dispatch trees finished before `cutoff_ms`
        and up to `limit` audit records committed before `audit_cutoff_ms` whose subject (an
        approval request or a dispatch) finished before it too, with the counts.
        With `dry_run`, what a whole prune would remove now, writing nothing."""
        ...

    async def reclaim_space(self, *, max_pages: int) -> int:
        """Give up to `max_pages` free pages back to the file system (SQLite's incremental
        vacuum); the pages freed. PostgreSQL's autovacuum does this itself: 0."""
        ...
