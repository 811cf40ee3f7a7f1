"""The composition root: the only place that picks and imports a dialect's adapter."""

from __future__ import annotations

import random

from qinglong_dispatcher import api, dispatcher, ports
from qinglong_dispatcher.actions import run_create
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.recovery import reconciler, run_create_evidence
from qinglong_dispatcher.settings import Settings


async def open_store(settings: Settings) -> ports.Store:
    """Open the profile's store; edge never imports asyncpg (it is imported only here, lazily)."""
    if settings.dialect == "sqlite":
        from qinglong_dispatcher.adapters.sqlite import store as sqlite_store

        path = settings.sqlite_path
        if not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        return await sqlite_store.SqliteStore.open(
            path, busy_timeout_s=settings.sqlite_busy_timeout_seconds
        )
    raise errors.ConfigurationError(
        "QINGLONG_DATABASE_URL: the PostgreSQL store is not part of this build yet"
    )


def handlers(store: ports.Store, clock: ports.Clock) -> dict[str, ports.ApprovedActionHandler]:
    """The built-in actions, keyed by action type."""
    return {run_create.ACTION_TYPE: run_create.RunCreateHandler(store, store, clock)}


def evidence_providers(store: ports.Store) -> dict[str, ports.EvidenceProvider]:
    """Evidence providers by action type; an action without one is manual-only."""
    return {run_create.ACTION_TYPE: run_create_evidence.RunCreateEvidence(store)}


def build_reconciler(store: ports.Store, clock: ports.Clock) -> reconciler.Reconciler:
    """The reconciler: the store and the providers, and no handler at all."""
    return reconciler.Reconciler(store, evidence_providers(store), clock)


def build_dispatcher(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    *,
    extra_handlers: dict[str, ports.ApprovedActionHandler] | None = None,
) -> dispatcher.Dispatcher:
    """A dispatcher with the profile's budget and the built-in actions."""
    config = dispatcher.DispatchConfig(
        owner=settings.owner_id,
        page_size=settings.page_size,
        lease_ms=settings.lease_ms,
        concurrency=settings.concurrency,
        retry_backoff_ms=int(settings.retry_backoff_seconds * 1000),
        execute_timeout_ms=int(settings.execute_timeout * 1000),
    )
    return dispatcher.Dispatcher(
        store,
        {**handlers(store, clock), **(extra_handlers or {})},
        clock,
        config,
        rng=random.Random(),
    )


def build_api(settings: Settings, store: ports.Store, clock: ports.Clock) -> api.Api:
    """The approval API with the profile's TTL and attempt budget."""
    return api.Api(
        store,
        clock,
        api.Policy(
            approval_ttl_ms=int(settings.approval_ttl_seconds * 1000),
            max_attempts=settings.max_attempts,
        ),
    )
