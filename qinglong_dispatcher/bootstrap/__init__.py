"""The composition root: the only place that picks and imports a dialect's adapter.

Read top to bottom, this module is how `run` builds the daemon: the store, the actions, the
dispatcher, the reconciler, the daemon's parts, then `open_daemon`, which opens and checks the
store, takes its authority, builds the parts and starts the listeners in that order (and
closes them in reverse). Beside it: `listeners` (the metrics and health listener, the
control-plane API) and `tools` (what the other commands reach an adapter for).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters import dialect
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, plan_previews, plans
from qinglong_dispatcher.ports import action_tables

if TYPE_CHECKING:
    # A read command (`status`, `dispatch list`) needs a store, not the daemon: the dispatcher,
    # the actions, the lifecycle and the reconciler are imported by the functions that build
    # them, so such a command starts in a fraction of the time.
    from qinglong_dispatcher.actions import contract, registry
    from qinglong_dispatcher.dispatching import dispatcher
    from qinglong_dispatcher.lifecycle import daemon, skew
    from qinglong_dispatcher.recovery import reconciler

log = structlog.get_logger("qinglong_dispatcher.daemon")

# -- the store --------------------------------------------------------------------------------


def _dialect(settings: Settings) -> dialect.Dialect:
    """The profile's dialect; edge never imports asyncpg (it is imported only here, lazily)."""
    if settings.dialect == "sqlite":
        from qinglong_dispatcher.adapters.edge import SqliteDialect

        return SqliteDialect(builtin_tables())
    if settings.dialect != "postgres":  # pragma: no cover - settings admit only the two
        raise errors.ConfigurationError(f"QINGLONG_DATABASE_URL: no store for {settings.dialect}")
    with cluster_driver():
        from qinglong_dispatcher.adapters.cluster import PostgresDialect
    return PostgresDialect(builtin_tables())


@contextlib.contextmanager
def cluster_driver() -> Iterator[None]:
    """Around an import of the PostgreSQL side: asyncpg is the `cluster` extra, which an edge
    install goes without, so its absence is one configuration error naming the extra."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "asyncpg":
            raise
        raise errors.ConfigurationError(
            "the cluster profile needs asyncpg, which this install does not have: "
            "pip install 'qinglong-dispatcher[cluster]'"
        ) from None


def builtin_tables() -> action_tables.BuiltInTables:
    """The tables the built-in actions own, lent to every store this process opens: the
    adapters never import an action (their statements and hooks come from here; each
    action's repository is its own, built over the store in its `BuiltInContext`)."""
    from qinglong_dispatcher.actions.run_create import tables as run_create
    from qinglong_dispatcher.actions.tool_invoke import tables as tool_invoke

    return action_tables.BuiltInTables(each=(run_create.TABLES, tool_invoke.TABLES))


async def open_store(
    settings: Settings,
    *,
    create: bool = True,
    require_current: bool = False,
    check_integrity: bool = False,
) -> ports.Store:
    """Open the profile's store.

    `create=False` refuses a SQLite file that does not exist instead of creating it;
    `check_integrity` refuses a damaged file, before its schema is even read, and
    `require_current` an unmigrated, tampered or newer schema."""
    store = await _dialect(settings).open_store(settings, create=create)
    if require_current or check_integrity:
        try:
            if check_integrity:
                await store.check_integrity()
            if require_current:
                (await store.schema_state()).require_current()
        except BaseException:
            await store.close()
            raise
    return store


@contextlib.contextmanager
def sole_daemon(settings: Settings) -> Iterator[None]:
    """On edge, hold the SQLite file's daemon lock for as long as `run` runs (one authority per
    file); a second daemon gets `StoreInUse`. Nothing to hold on cluster."""
    with _dialect(settings).sole_daemon(settings):
        yield


async def check_store(store: ports.Store) -> None:
    """What `run` and `tick` check before they claim: a store that cannot keep a commit
    through a primary loss refuses (`DurabilityRefused`); what blocks some plans is said
    once, never the process."""
    await store.check_durability()
    found = await store.probe_plan_keys()
    if found.not_in_ring:
        log.warning("plan_keys.not_in_ring", key_ids=list(found.not_in_ring))
    if found.newest_unreadable is not None:
        log.warning("plan_keys.newest_unreadable", code=found.newest_unreadable)


async def open_api_writer(settings: Settings) -> ports.Store | None:
    """The store of `QINGLONG_API_DATABASE_URL` (the API's NOINHERIT login, cluster), whose
    transactions become each token's principal; None when unset (the daemon's store acts)."""
    if settings.api_database_url is None:
        return None
    api_settings = settings.model_copy(update={"database_url": settings.api_database_url})
    return await _dialect(settings).open_store(api_settings, create=False)


# -- the actions ------------------------------------------------------------------------------


def builtin_context(
    store: ports.Store,
    clock: ports.Clock,
    settings: Settings | None = None,
    *,
    tool_sandbox_dir: Path | None = None,
    profile: str = "edge",
) -> contract.BuiltInContext:
    """What the built-in actions' factories get: from `settings` when given (the daemon and
    the commands), else only a sandbox and a profile (tests that need nothing more)."""
    from qinglong_dispatcher.actions import builtin, contract

    if settings is None:
        return contract.BuiltInContext(
            store=store, clock=clock, profile=profile, tool_sandbox_dir=tool_sandbox_dir
        )
    return contract.BuiltInContext(
        store=store,
        clock=clock,
        profile=settings.profile,
        tool_sandbox_dir=settings.tool_sandbox_dir,
        execute_timeout_s=settings.execute_timeout,
        settings=builtin.own_settings(settings),
    )


def handlers(
    store: ports.Store,
    clock: ports.Clock,
    *,
    tool_sandbox_dir: Path | None = None,
    profile: str = "edge",
    settings: Settings | None = None,
) -> dict[str, ports.ApprovedActionHandler]:
    """The built-in actions' handlers, keyed by action type.

    An action whose configuration is missing (`tool.invoke` without a sandbox directory,
    `http.request` without receivers, `command.run` without commands) has none: its
    dispatches wait (pending again later, the attempt refunded).
    """
    from qinglong_dispatcher.actions import builtin

    return builtin.handlers(
        builtin_context(store, clock, settings, tool_sandbox_dir=tool_sandbox_dir, profile=profile)
    )


def action_plan_models() -> plans.PlanModels:
    """The plan models of the built-in actions and of the installed ones (entry points)."""
    from qinglong_dispatcher.actions import builtin, registry

    return {**builtin.PLAN_MODELS, **registry.installed().plan_models}


def plan_preview_fields() -> plan_previews.ShownFields:
    """The members a redacted preview shows as they are, per action type: every model this
    process knows (built-in and installed), each without its `SENSITIVE_FIELDS`."""
    return plan_previews.shown_by_type(action_plan_models())


# -- the dispatcher and the reconciler --------------------------------------------------------


def dispatch_config(settings: Settings, *, owner: str) -> dispatcher.DispatchConfig:
    """The dispatcher's budget from the settings, for `owner`."""
    from qinglong_dispatcher.dispatching import dispatcher

    return dispatcher.DispatchConfig(
        owner=owner,
        page_size=settings.page_size,
        passage_page_size=settings.passage_page_size,
        lease_ms=settings.lease_ms,
        concurrency=settings.concurrency,
        retry_backoff_ms=int(settings.retry_backoff_seconds * 1000),
        execute_timeout_ms=int(settings.execute_timeout * 1000),
    )


def build_dispatcher(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    *,
    extra_handlers: dict[str, ports.ApprovedActionHandler] | None = None,
    on_renewal: dispatcher.RenewalObserver | None = None,
    installed: registry.Installed | None = None,
) -> dispatcher.Dispatcher:
    """A dispatcher with the profile's budget, the built-in actions and the installed ones
    (`installed`, by default this process's entry points: `registry.installed()`)."""
    from qinglong_dispatcher.actions import registry
    from qinglong_dispatcher.dispatching import dispatcher

    actions = registry.installed(announce=True) if installed is None else installed
    config = dispatch_config(settings, owner=settings.owner_id)
    return dispatcher.Dispatcher(
        store,
        {
            **handlers(store, clock, settings=settings),
            **actions.handlers(actions.context(store, clock)),
            **(extra_handlers or {}),
        },
        clock,
        config,
        rng=random.Random(),
        on_renewal=on_renewal,
    )


def build_reconciler(
    store: ports.Store,
    clock: ports.Clock,
    *,
    tool_sandbox_dir: Path | None = None,
    profile: str = "edge",
    settings: Settings | None = None,
    installed: registry.Installed | None = None,
) -> reconciler.Reconciler:
    """The reconciler: the store and the providers, and no handler at all.

    `installed` defaults to this process's entry-point actions (`registry.installed()`)."""
    from qinglong_dispatcher.actions import builtin, registry
    from qinglong_dispatcher.recovery import reconciler

    actions = registry.installed() if installed is None else installed
    context = builtin_context(
        store, clock, settings, tool_sandbox_dir=tool_sandbox_dir, profile=profile
    )
    return reconciler.Reconciler(
        store,
        {
            **builtin.evidence_providers(context),
            **actions.evidence_providers(actions.context(store, clock)),
        },
        clock,
    )


# -- the daemon -------------------------------------------------------------------------------


def skew_guard(settings: Settings) -> skew.SkewGuard | None:
    """Cluster: the clock-skew guard every dispatch tick checks first, the daemon's and
    `tick`'s alike (None on edge: one machine, one clock)."""
    if settings.profile != "cluster":
        return None
    from qinglong_dispatcher.lifecycle import skew

    return skew.SkewGuard(settings.max_clock_skew_seconds)


def build_daemon_parts(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    *,
    acting: ports.PrincipalStores | None = None,
) -> daemon.Parts:
    """Everything the daemon owns, wired for the profile (`acting`: where the API's writes
    become each token's principal; by default `store` itself)."""
    from qinglong_dispatcher.bootstrap import listeners
    from qinglong_dispatcher.lifecycle import daemon, http, metrics, pruning, systemd

    the_metrics = metrics.Metrics(profile=settings.profile, cadence_s=settings.cadence_seconds)
    the_dispatcher = build_dispatcher(settings, store, clock, on_renewal=the_metrics.record_renewal)
    # A tick waits for its executes, so liveness allows the execute timeout on top.
    stale_after = max(
        3 * settings.cadence_seconds, settings.execute_timeout + settings.cadence_seconds
    )
    parts = daemon.Parts(
        settings=settings,
        store=store,
        clock=clock,
        dispatcher=the_dispatcher,
        reconciler=build_reconciler(store, clock, settings=settings),
        metrics=the_metrics,
        health=http.Health(cadence_s=settings.cadence_seconds, stale_after_s=stale_after),
        notifier=systemd.Notifier(),
        skew_guard=skew_guard(settings),
    )
    if settings.wakeup_on_submit:
        parts.wakeup = _dialect(settings).wakeup(settings)
    if settings.retention_days > 0:
        parts.pruner = pruning.Pruner(store, clock, metrics=the_metrics)
    if settings.api_listen is not None:
        parts.api = listeners.api_server(
            settings, store, clock, the_metrics, parts.health, authenticator=store, acting=acting
        )
    if settings.notify_deliver:
        parts.deliverer = listeners.deliverer(settings, store, the_metrics)
    return parts


@contextlib.asynccontextmanager
async def open_daemon(settings: Settings) -> AsyncIterator[daemon.Daemon]:
    """`run`'s daemon, in this order: the store (a damaged file, an unmigrated schema and a
    commit a primary loss could lose refused), its authority (`sole_daemon`), the API's
    writer, the parts, the metrics listener; closed in reverse, the authority last. The
    daemon says it is ready only once it hears SIGTERM (`Daemon.run`)."""
    from qinglong_dispatcher.bootstrap import listeners
    from qinglong_dispatcher.clock import SystemClock
    from qinglong_dispatcher.lifecycle import daemon

    store = await open_store(settings, create=False, require_current=True, check_integrity=True)
    authority = contextlib.ExitStack()
    async with contextlib.AsyncExitStack() as opened:
        opened.callback(authority.close)  # after the store is closed: a next daemon may start
        opened.push_async_callback(store.close)
        authority.enter_context(sole_daemon(settings))
        await check_store(store)
        if reasons := await store.ddl_capabilities():
            log.warning("store.ddl_capable_role", reasons=list(reasons))
        writer = await open_api_writer(settings)
        if writer is not None:
            opened.push_async_callback(writer.close)
        parts = build_daemon_parts(settings, store, SystemClock(), acting=writer)
        opened.callback(listeners.metrics_listener(settings, parts).stop)
        yield daemon.Daemon(parts)


# -- what the other commands need ------------------------------------------------------------


def policy(settings: Settings) -> api.Policy:
    """What the use cases take from the settings: a request's lifetime, a dispatch's attempts."""
    return api.Policy(
        approval_ttl_ms=int(settings.approval_ttl_seconds * 1000),
        max_attempts=settings.max_attempts,
    )


def build_api(settings: Settings, store: ports.Store, clock: ports.Clock) -> api.Api:
    """The approval API with the profile's TTL and attempt budget."""
    return api.Api(store, clock, policy(settings), installed_plan_models=action_plan_models)


async def move_installation(settings: Settings, to: str) -> tuple[str, list[str]]:
    """`migrate --move-to`: the database's roles become installation `to`'s (PostgreSQL)."""
    return await _dialect(settings).move_installation(settings, to)
