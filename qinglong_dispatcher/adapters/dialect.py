"""`Dialect`: everything the composition root asks of a database engine, in one object.

Each dialect package exports its class (`SqliteDialect`, `PostgresDialect`), built with the
built-in actions' tables; the composition root imports the chosen package only, so the edge
profile never loads the PostgreSQL one (nor asyncpg).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Protocol

from qinglong_dispatcher import ports
from qinglong_dispatcher.plan_keys import envelopes as plan_envelopes


class Configured(Protocol):
    """What a dialect reads of the settings (the composition root's `Settings` is one)."""

    @property
    def database_url(self) -> str: ...
    @property
    def sqlite_path(self) -> Path: ...
    @property
    def sqlite_busy_timeout_seconds(self) -> float: ...
    @property
    def sqlite_reserve_mib(self) -> int: ...
    @property
    def self_approval(self) -> bool: ...
    @property
    def api_self_approval(self) -> bool: ...
    @property
    def allow_async_commit(self) -> bool: ...
    @property
    def require_sync_standby(self) -> bool: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def installation(self) -> str | None: ...
    @property
    def plan_keyring_file(self) -> Path | None: ...
    @property
    def plan_keyring_group_readable(self) -> bool: ...


class Dialect(Protocol):
    """Opening a store and the few engine-specific tools beside it."""

    async def open_store(self, settings: Configured, *, create: bool) -> ports.Store:
        """The store (`create=False`: refuse a SQLite file that does not exist)."""
        ...

    async def move_installation(self, settings: Configured, to: str) -> tuple[str, list[str]]:
        """`migrate --move-to`: give the database installation `to`'s roles."""
        ...

    def sole_daemon(self, settings: Configured) -> contextlib.AbstractContextManager[None]:
        """Held while `run` runs: a second daemon on the same database is refused."""
        ...

    def wakeup(self, settings: Configured) -> ports.WakeupListener | None:
        """The source of wake-ups on submit, or None where the engine has none."""
        ...


def envelopes(settings: Configured) -> plan_envelopes.Envelopes:
    """The envelopes of the configured plan key ring, which every store a dialect opens takes
    (`envelopes.from_keyring`: none configured, plans in clear; an unusable ring refused)."""
    return plan_envelopes.from_keyring(
        settings.plan_keyring_file, group_readable=settings.plan_keyring_group_readable
    )
