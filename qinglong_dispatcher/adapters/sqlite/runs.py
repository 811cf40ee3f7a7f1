"""Bridge to the shared `run.create` reads for SQLite modules not yet on the shared layer."""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher.adapters.sql import runs as sql_runs
from qinglong_dispatcher.adapters.sqlite import database
from qinglong_dispatcher.domain import runs


def get_run(conn: sqlite3.Connection, run_id: str) -> runs.Run | None:
    """One Run by id, inside the caller's transaction (`sql_runs.get_run`)."""
    return database.drive(sql_runs.get_run(database.SqliteQuery(conn), run_id))
