"""A full disk at one chosen statement of a real SQLite write, and space coming back.

SQLite reports a full disk (SQLITE_FULL) when a write needs a page beyond the file's limit:
a device that is full, or `PRAGMA max_page_count` reached. Which statement first needs a new
page depends on how full the last pages happen to be, so a test could not say which write
path it broke. Here the limit is set a little above the file's size (room for every real
write of a test), and a TEMP trigger on the chosen table — on the store's own connection
only, never in the file — adds a 1 MiB row to a padding table while `full` is set. That row
cannot fit: the pager raises the real SQLITE_FULL inside the real transaction, at that
statement, and the transaction rolls back whole as it would on a full device.
"""

from __future__ import annotations

import sqlite3

from qinglong_dispatcher.adapters.sqlite import store as sqlite_store

PAD_BYTES = 1 << 20
HEADROOM_PAGES = 128
"""Pages the real writes of a test may still add while the disk is "full" (the pad needs ~256)."""
NO_LIMIT = 1_073_741_823


class DiskFull:
    """Installed on one store's connection; `full` decides whether the next pad is written."""

    def __init__(self, store: sqlite_store.SqliteStore) -> None:
        self._store = store
        self.full = False
        self.once = False
        """Clear `full` again after the first failure (space freed at once, for retry paths)."""
        self.failures = 0
        self.seen: list[dict[str, list[tuple[object, ...]]]] = []
        """The committed rows each time the chosen statement ran: the first failing one shows
        the state before the failed write, a later one what the failure left."""

    def _is_full(self) -> int:
        self.seen.append(snapshot(self._store.db.path))
        if not self.full:
            return 0
        self.failures += 1
        if self.once:
            self.full = False
        return 1

    async def install(self, table: str, when: str = "1") -> DiskFull:
        """Fail every insert into `table` whose row matches `when` (SQL on NEW) while full."""

        def body(conn: sqlite3.Connection) -> None:
            conn.create_function("test_disk_full", 0, self._is_full)
            conn.execute("CREATE TABLE IF NOT EXISTS main.test_disk_pad (pad BLOB)")
            conn.execute(
                f"CREATE TEMP TRIGGER test_disk_full_{table} AFTER INSERT ON main.{table} "
                # CASE, not AND: SQLite may evaluate both sides of an AND.
                f"WHEN CASE WHEN ({when}) THEN test_disk_full() ELSE 0 END "
                f"BEGIN INSERT INTO test_disk_pad VALUES (zeroblob({PAD_BYTES})); END"
            )
            pages = conn.execute("PRAGMA main.page_count").fetchone()[0]
            free = conn.execute("PRAGMA main.freelist_count").fetchone()[0]
            page_size = conn.execute("PRAGMA main.page_size").fetchone()[0]
            assert (free + HEADROOM_PAGES) * page_size < PAD_BYTES, "the pad would fit"
            conn.execute(f"PRAGMA main.max_page_count = {pages + HEADROOM_PAGES}")

        await self._store.db.read(body)
        return self

    async def space_back(self) -> None:
        """The operator freed space: no limit, no more pads."""
        self.full = False

        def body(conn: sqlite3.Connection) -> None:
            conn.execute(f"PRAGMA main.max_page_count = {NO_LIMIT}")

        await self._store.db.read(body)


def snapshot(path: object) -> dict[str, list[tuple[object, ...]]]:
    """Every committed row of every table but the pad, in a stable order (a reader's view)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name <> 'test_disk_pad' ORDER BY name"
            )
        ]
        return {
            name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
            for name in tables
        }
    finally:
        conn.close()
