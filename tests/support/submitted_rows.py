"""What a submit writes on PostgreSQL, counted: the submit path tests and the attacks on
`qinglong.submit_one` assert that a refused submit changed none of it."""

from __future__ import annotations

from tests.support import stores

TABLES = (
    "action_plans",
    "approval_requests",
    "approved_action_dispatches",
    "approved_action_dispatch_executions",
    "security_audit_events",
)
"""Everything a submit writes: the plan, the request, the dispatch, the execution, and the
approval trigger's audit rows."""


async def counts(pg: stores.Harness) -> dict[str, int]:
    """The row count of each of `TABLES`."""
    return {t: int(await pg.scalar(f"SELECT count(*) FROM qinglong.{t}")) for t in TABLES}
