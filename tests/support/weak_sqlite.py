"""`qinglong-dispatcher` whose SQLite open path leaves one durability pragma weakened.

Run as `python -m tests.support.weak_sqlite MODE ARGS…` (MODE `synchronous` or `journal`): the
production `connect` runs whole, then this sets `synchronous = NORMAL` or `journal_mode =
DELETE` on the real connection, as a regression of the open path (or a driver that ignored a
pragma) would. The commands must refuse it before claiming anything.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

from qinglong_dispatcher import cli
from qinglong_dispatcher.adapters.sqlite import database

WEAKEN = {"synchronous": "PRAGMA synchronous = NORMAL", "journal": "PRAGMA journal_mode = DELETE"}


def main() -> int:
    mode, *args = sys.argv[1:]
    production = database.connect

    def weakened(path: Path, **kwargs: Any) -> sqlite3.Connection:
        conn = production(path, **kwargs)
        conn.execute(WEAKEN[mode])
        return conn

    database.connect = weakened
    return cli.main(args)


if __name__ == "__main__":
    sys.exit(main())
