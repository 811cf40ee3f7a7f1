"""PostgreSQL's one-statement start barrier, beside the shared transaction it shortcuts.

The shared barrier (`adapters/sql/executions.start`) costs a round trip per statement and
one each for BEGIN and COMMIT; on the happy path `start_fast` writes the same facts — the
fenced `start_row` update and its ledger event — in one data-modifying CTE, its own implicit
transaction (README, "Performance": with `run.create`'s, cluster 235 → 668 dispatches/s).
Anything else — a replay, a lost lease, a wrong binding — matches nothing here and goes to the
shared transaction, which decides.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.adapters.postgres.queries import Q
from qinglong_dispatcher.adapters.sql import executions
from qinglong_dispatcher.domain import records


async def start_fast(
    database: db.Database, request: records.StartRequest, *, now_ms: int, lease_ms: int
) -> records.StartResult | None:
    """The barrier in one statement when everything matches; None: nothing was written, run
    the shared transaction."""
    params = executions.start_params(request, now_ms=now_ms, lease_ms=lease_ms)
    done = await database.statement(Q["start_fast"], params)
    if done is None:
        return None
    return executions.started(request, done, now_ms=now_ms)
