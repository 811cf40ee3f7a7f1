"""Reading an edge SQLite file from outside the store, read-only."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def execution_statuses(path: Path) -> dict[str, int]:
    """How many executions the file holds in each stored status."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(
            conn.execute(
                "SELECT status, count(*) FROM approved_action_dispatch_executions GROUP BY status"
            ).fetchall()
        )
    finally:
        conn.close()
