"""What every command shares: exit codes, one-line usage errors, JSON output, opening the store."""

from __future__ import annotations

import json
import sys

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.config.settings import Settings

PROG = "qinglong-dispatcher"
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_CONFIG = 0, 1, 2, 69, 78


class UsageError(Exception):
    """Bad command-line usage, reported as one line with exit code 2."""


def print_json(value: object) -> None:
    """Exactly one line of JSON on stdout."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")


async def open_store(
    settings: Settings,
    *,
    require_current: bool = True,
    create: bool = False,
    check_integrity: bool = False,
) -> ports.Store:
    """Open the profile's store; refuse an unmigrated, tampered or newer schema.

    Only `migrate` creates a SQLite file (`create`): for any other command a missing file is
    a mistyped path, reported as such, never a new empty database. `check_integrity` (`run`
    and `tick`) first refuses a damaged file, before its schema is even read."""
    return await bootstrap.open_store(
        settings, create=create, require_current=require_current, check_integrity=check_integrity
    )
