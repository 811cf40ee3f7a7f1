"""`audit export`: the audit records and ledger lines, out to standard output or syslog.

Records leave in export order below the commit horizon (docs/decisions/0043), each carrying
the cursor just after it. On SIGTERM/SIGINT, at the end, or when the sink fails, the last
cursor written goes to standard error as `resume with --after <cursor>`: a restart from it
neither skips nor repeats a record.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from qinglong_dispatcher.commands import audit_sinks, common
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import audit_export, audit_formats, errors
from qinglong_dispatcher.lifecycle import shutdown
from qinglong_dispatcher.usecases import exporting


def add_arguments(p: argparse.ArgumentParser, shared: argparse.ArgumentParser) -> None:
    """`audit export`."""
    sub = p.add_subparsers(dest="audit_command", metavar="STEP", required=True)
    e = sub.add_parser(
        "export",
        parents=[shared],
        help="every audit record and ledger line, in database order (JSON lines or CEF)",
    )
    e.add_argument(
        "--since",
        metavar="TIME",
        help="records committed at or after TIME, RFC 3339 with its offset "
        "(2026-12-01T00:00:00Z); required unless --after is given",
    )
    e.add_argument(
        "--after",
        metavar="CURSOR",
        help="resume after CURSOR (<audit>.<ledger>, as the last record or the stop printed)",
    )
    e.add_argument(
        "--format",
        choices=[f.value for f in audit_formats.Format],
        default=audit_formats.Format.JSONL.value,
        help="jsonl (schema v1, default) or cef (ArcSight Common Event Format)",
    )
    e.add_argument(
        "--follow",
        action="store_true",
        help="keep exporting new records as they commit, until SIGTERM/SIGINT",
    )
    e.add_argument(
        "--syslog",
        metavar="URL",
        help="send each record as an RFC 5424 message to udp://host[:port] or "
        "unix:///dev/log instead of printing it",
    )
    e.add_argument(
        "--page-size",
        type=int,
        default=500,
        metavar="N",
        help=f"records read at a time, 1-{audit_export.MAX_PAGE} (default 500)",
    )


def _export(args: argparse.Namespace, settings: Settings) -> exporting.Export:
    """The export the arguments ask for; `UsageError` naming the bad one."""
    if args.since is None and args.after is None:
        raise common.UsageError("audit export: give --since TIME or --after CURSOR")
    if not 1 <= args.page_size <= audit_export.MAX_PAGE:
        raise common.UsageError(f"--page-size: must be between 1 and {audit_export.MAX_PAGE}")
    try:
        since_ms = 0 if args.since is None else audit_export.parse_since(args.since)
        after = (
            audit_export.Cursor() if args.after is None else audit_export.Cursor.parse(args.after)
        )
    except errors.InvalidInput as exc:
        raise common.UsageError(f"--{exc}") from None
    return exporting.Export(
        after=after,
        since_ms=since_ms,
        page_size=args.page_size,
        follow=args.follow,
        poll_s=settings.cadence_seconds,
    )


async def cmd_audit(settings: Settings, args: argparse.Namespace) -> int:
    """`audit export`: pages out until done (or stopped); the last cursor to stderr."""
    export = _export(args, settings)
    sink: audit_sinks.Sink
    if args.syslog is not None:
        sink = audit_sinks.Syslog(args.syslog)
    else:
        sink = audit_sinks.Lines(audit_formats.Format(args.format))
    last = export.after
    failure: Exception | None = None
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(shutdown.watch, stop)
            try:
                store = await common.open_store(settings)
                try:
                    async for page in exporting.pages(store, export, stop):
                        for record, cursor in page.records:
                            sink.send(record.as_dict(cursor))
                            last = cursor
                        sink.flush()
                finally:
                    await store.close()
            except (audit_sinks.SyslogUnavailable, BrokenPipeError, errors.QinglongError) as exc:
                failure = exc  # raised below, outside the task group (not as a group)
                if isinstance(exc, audit_sinks.SyslogUnavailable):
                    print(f"{common.PROG}: error: {exc}", file=sys.stderr)
            tg.cancel_scope.cancel()
    finally:
        sink.close()
        # Also when a fault ends the export: what was written stays written.
        print(f"{common.PROG}: audit export: resume with --after {last}", file=sys.stderr)
    if isinstance(failure, audit_sinks.SyslogUnavailable | BrokenPipeError):
        return common.EXIT_UNAVAILABLE
    if failure is not None:
        raise failure
    return common.EXIT_OK
