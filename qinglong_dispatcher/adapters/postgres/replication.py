"""`QINGLONG_REQUIRE_SYNC_STANDBY`: is every acknowledged commit also on a synchronous standby?

A commit PostgreSQL acknowledges is durable on the primary; it survives the primary's loss
only if a synchronous standby had it before the acknowledgement (`synchronous_commit` `on` or
`remote_apply`, and a standby in `sync` or `quorum` state in `pg_stat_replication`). Reading
a standby's `sync_state` needs the privileges of `pg_read_all_stats` (for anyone else the
server shows the walsender row with its columns NULL): the operator grants that built-in role
to the runtime login when enabling the setting, rather than a migration granting it to every
member of the installation's runtime role.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.postgres import database as db
from qinglong_dispatcher.domain import errors

SAFE_LEVELS = frozenset({"on", "remote_apply"})
"""`synchronous_commit` values that wait for the synchronous standby before acknowledging
(`remote_write` acknowledges before the standby has flushed)."""

SETTING = "QINGLONG_REQUIRE_SYNC_STANDBY"

# A diagnostic read of server state, not a store operation: like the DDL-capabilities probe it
# has no SQLite counterpart, so it is not a named statement.
_REPLICATION_STATE = """
SELECT pg_catalog.current_setting('synchronous_commit') AS level,
       pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS visible,
       (SELECT count(*) FROM pg_catalog.pg_stat_replication
        WHERE sync_state IN ('sync', 'quorum')) AS synchronous
"""


async def require_sync_standby(database: db.Database) -> None:
    """Raise `DurabilityRefused` (one line) unless the primary has a synchronous standby and
    this session's `synchronous_commit` waits for it."""

    async def read(conn: db.Connection) -> tuple[str, bool, int]:
        row = await conn.fetchrow(_REPLICATION_STATE)
        return str(row["level"]), bool(row["visible"]), int(row["synchronous"])

    level, visible, synchronous = await database.read(read)
    if level.lower() not in SAFE_LEVELS:
        raise errors.DurabilityRefused(
            f"{SETTING}: PostgreSQL synchronous_commit is {level}, not on or remote_apply: "
            "an acknowledged commit may be missing from the standby"
        )
    if not visible:
        raise errors.DurabilityRefused(
            f"{SETTING}: this login cannot see pg_stat_replication.sync_state; "
            "GRANT pg_read_all_stats to the runtime login"
        )
    if synchronous == 0:
        raise errors.DurabilityRefused(
            f"{SETTING}: PostgreSQL has no synchronous standby (none in sync or quorum state "
            "in pg_stat_replication): a primary loss could lose acknowledged commits"
        )
