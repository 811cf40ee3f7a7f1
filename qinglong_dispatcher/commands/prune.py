"""`prune`: delete finished dispatch trees and old audit records, in bounded batches."""

from __future__ import annotations

import argparse

from qinglong_dispatcher import clock
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, retention


def duration_ms(text: str) -> int:
    """argparse type of `--older-than` and `--audit-older-than`: `7d`, `12h`, `30m`."""
    try:
        return retention.parse_duration_ms(text)
    except errors.InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `prune`."""
    p.add_argument(
        "--older-than",
        required=True,
        type=duration_ms,
        metavar="DURATION",
        help="prune dispatch trees that finished longer ago than this: 7d, 12h, 30m",
    )
    p.add_argument(
        "--audit-older-than",
        type=duration_ms,
        metavar="DURATION",
        help="prune audit records older than this (QINGLONG_AUDIT_RETENTION_DAYS, 365 days)",
    )
    p.add_argument("--dry-run", action="store_true", help="only count what would be pruned")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON line")


async def cmd_prune(settings: Settings, args: argparse.Namespace) -> int:
    """Prune until nothing older than the cutoffs is left (or, with --dry-run, count it)."""
    audit_ms: int = (
        args.audit_older_than
        if args.audit_older_than is not None
        else retention.days_ms(settings.audit_retention_days)
    )
    cutoffs = retention.Cutoffs.at(
        clock.SystemClock().now_ms(), retention_ms=args.older_than, audit_retention_ms=audit_ms
    )
    # Imported here: the parser imports this module, and the pruner brings the metrics.
    from qinglong_dispatcher.lifecycle import pruning

    store = await common.open_store(settings)
    freed = 0
    try:
        report = await pruning.Pruner(store, clock.SystemClock()).prune(
            cutoffs, dry_run=args.dry_run
        )
        if not args.dry_run:
            # SQLite: hand every freed page back, a bounded step at a time (PostgreSQL: 0).
            while (step := await store.reclaim_space(max_pages=retention.VACUUM_PAGES)) > 0:
                freed += step
    finally:
        await store.close()
    counts = report.counts
    if args.json:
        common.print_json(
            {
                "dry_run": args.dry_run,
                "dispatches": counts.dispatches,
                "audit_events": counts.audit_events,
                "notification_events": counts.notification_events,
                "batches": report.batches,
                "pages_freed": freed,
            }
        )
    elif args.dry_run:
        print(
            f"would prune {counts.dispatches} dispatch trees, {counts.audit_events} audit "
            f"records and {counts.notification_events} notification events"
        )
    else:
        print(
            f"pruned {counts.dispatches} dispatch trees, {counts.audit_events} audit records "
            f"and {counts.notification_events} notification events in {report.batches} batches"
        )
    return common.EXIT_OK
