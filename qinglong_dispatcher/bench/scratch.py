"""Scratch stores the bench creates and removes: a temp SQLite file, or a scratch database."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.bench import dialects
from qinglong_dispatcher.config.settings import Settings, load_settings


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Scratch:
    """A migrated scratch store's settings (same profile, its own URL)."""

    settings: Settings
    url: str

    def env(self, **extra: str) -> dict[str, str]:
        """`QINGLONG_*` variables that point a subprocess at this store (and its key ring)."""
        ring = self.settings.plan_keyring_file
        return {
            "QINGLONG_PROFILE": self.settings.profile,
            "QINGLONG_DATABASE_URL": self.url,
            **({} if ring is None else {"QINGLONG_PLAN_KEYRING_FILE": str(ring)}),
            **{f"QINGLONG_{k.upper()}": v for k, v in extra.items()},
        }

    async def open(self) -> ports.Store:
        """A store on the scratch database."""
        return await bootstrap.open_store(self.settings)


@contextlib.asynccontextmanager
async def scratch(
    settings: Settings, *, plan_keyring: Path | None = None
) -> AsyncIterator[Scratch]:
    """Create, migrate, yield and remove one scratch store of the profile's dialect (its plans
    sealed under `plan_keyring` when one is given, else in clear whatever `settings` say)."""
    async with dialects.of(settings).scratch_database() as url:
        # The bench submits (a self-approval) into its own scratch store, whatever the policy
        # of the real one; on PostgreSQL its administrator login is a superuser, a member of
        # every role.
        made = Scratch(
            settings=load_settings(
                profile=settings.profile,
                database_url=url,
                overrides={
                    "owner_id": "bench",
                    "self_approval": True,
                    "plan_keyring_file": plan_keyring,
                },
            ),
            url=url,
        )
        store = await made.open()
        try:
            await store.migrate(now_ms=clock.SystemClock().now_ms())
            await store.register_plan_keys(now_ms=clock.SystemClock().now_ms())
        finally:
            await store.close()
        yield made
