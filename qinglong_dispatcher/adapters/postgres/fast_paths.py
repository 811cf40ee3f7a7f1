"""PostgreSQL's one-statement happy paths, each beside the shared transaction it shortcuts.

The shared transactions (`adapters/sql/executions.start`, and run.create's, whose statement
`create_run_fast` `PostgresStore.create_run` runs with the parameters its tables give) cost a
round trip per statement and one each for BEGIN and COMMIT; on the happy path these write
the same facts in one data-modifying CTE, its own implicit transaction (docs/performance.md:
cluster 235 → 668 dispatches/s for the two together). Anything else — a replay, a lost
lease, a renewed version, a wrong binding, a collision — matches nothing here and goes to
the shared transaction, which decides.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.sql import executions
from qinglong_dispatcher.domain import records


async def start_fast(
    database: db.Database, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult | None:
    """The barrier in one statement when everything matches; None: nothing was written, run
    the shared transaction."""
    params = executions.start_params(request, now_ms=now_ms, lease_ms=lease_ms)
    done = await database.statement("start_fast", params)
    if done is None:
        return None
    return executions.started(request, done, now_ms=now_ms)
