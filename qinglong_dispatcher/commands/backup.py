"""`backup --out FILE`: a consistent copy of the edge profile's live SQLite file.

It runs beside the daemon (SQLite's online backup, through a read transaction of its own), so
the copy holds everything committed before it began; the key ring is backed up apart
(docs/operations.md#backup-and-restore). A cluster backs up with PostgreSQL's own tools.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio.to_thread

from qinglong_dispatcher.bootstrap import tools
from qinglong_dispatcher.commands import common
from qinglong_dispatcher.config.settings import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`backup --out FILE [--json]`."""
    p.add_argument("--out", required=True, type=Path, metavar="FILE", help="a new file")
    p.add_argument("--json", action="store_true")


async def cmd_backup(settings: Settings, args: argparse.Namespace) -> int:
    """Copy the live database to `--out`; refuse an existing file or the cluster profile."""
    if settings.profile != "edge":
        raise common.UsageError(
            "backup copies an edge SQLite file; back up PostgreSQL with pg_basebackup or pg_dump"
        )
    source = settings.sqlite_path
    size = await anyio.to_thread.run_sync(lambda: tools.backup_edge(settings, args.out))
    if args.json:
        common.print_json({"file": str(args.out), "bytes": size})
    else:
        print(f"backed up {source} to {args.out} ({size} bytes); back up the key ring apart")
    return common.EXIT_OK
