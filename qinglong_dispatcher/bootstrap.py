"""The composition root: the only place that picks and imports a dialect's adapter."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from qinglong_dispatcher import api, ports
from qinglong_dispatcher.adapters import dialect
from qinglong_dispatcher.config.settings import Settings
from qinglong_dispatcher.domain import errors, plan_previews, plans
from qinglong_dispatcher.plan_keys import keyring as plan_keyring
from qinglong_dispatcher.ports import action_tables

if TYPE_CHECKING:
    # A read command (`status`, `dispatch list`) needs a store, not the daemon: the dispatcher,
    # the actions, the lifecycle and the reconciler are imported by the functions that build
    # them, so such a command starts in a fraction of the time.
    from qinglong_dispatcher.actions import contract, registry
    from qinglong_dispatcher.dispatching import dispatcher
    from qinglong_dispatcher.lifecycle import daemon, http, metrics, skew
    from qinglong_dispatcher.recovery import reconciler


def _dialect(settings: Settings) -> dialect.Dialect:
    """The profile's dialect; edge never imports asyncpg (it is imported only here, lazily)."""
    if settings.dialect == "sqlite":
        from qinglong_dispatcher.adapters.sqlite import SqliteDialect

        return SqliteDialect(builtin_tables())
    if settings.dialect != "postgres":  # pragma: no cover - settings admit only the two
        raise errors.ConfigurationError(f"QINGLONG_DATABASE_URL: no store for {settings.dialect}")
    with cluster_driver():
        from qinglong_dispatcher.adapters.postgres import PostgresDialect
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


async def open_store(settings: Settings, *, create: bool = True) -> ports.Store:
    """Open the profile's store.

    `create=False` refuses a SQLite file that does not exist instead of creating it."""
    return await _dialect(settings).open_store(settings, create=create)


async def move_installation(settings: Settings, to: str) -> tuple[str, list[str]]:
    """`migrate --move-to`: the database's roles become installation `to`'s (PostgreSQL)."""
    return await _dialect(settings).move_installation(settings, to)


@contextlib.contextmanager
def sole_daemon(settings: Settings) -> Iterator[None]:
    """On edge, hold the SQLite file's daemon lock for as long as `run` runs (one authority per
    file); a second daemon gets `StoreInUse`. Nothing to hold on cluster."""
    with _dialect(settings).sole_daemon(settings):
        yield


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
    from qinglong_dispatcher.actions import contract

    if settings is None:
        return contract.BuiltInContext(
            store=store, clock=clock, profile=profile, tool_sandbox_dir=tool_sandbox_dir
        )
    return contract.BuiltInContext(
        store=store,
        clock=clock,
        profile=settings.profile,
        tool_sandbox_dir=settings.tool_sandbox_dir,
        receivers_file=settings.receivers_file,
        commands_file=settings.commands_file,
        execute_timeout_s=settings.execute_timeout,
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


def skew_guard(settings: Settings) -> skew.SkewGuard | None:
    """Cluster: the clock-skew guard every dispatch tick checks first (None on edge: one
    machine, one clock)."""
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
    )
    parts.skew_guard = skew_guard(settings)
    if settings.wakeup_on_submit:
        parts.wakeup = _dialect(settings).wakeup(settings)
    if settings.retention_days > 0:
        parts.pruner = pruning.Pruner(store, clock, metrics=the_metrics)
    if settings.api_listen is not None:
        parts.api = build_api_server(
            settings, store, clock, the_metrics, parts.health, authenticator=store, acting=acting
        )
    return parts


def build_api_server(
    settings: Settings,
    store: ports.Store,
    clock: ports.Clock,
    the_metrics: metrics.Metrics,
    health: http.Health,
    *,
    authenticator: ports.Authenticator | None = None,
    heartbeat_s: float | None = None,
    events_poll_s: float | None = None,
    acting: ports.PrincipalStores | None = None,
) -> daemon.Service:
    """The control-plane API (`QINGLONG_API_LISTEN`); aiohttp is imported here, only then.

    Until a token store fills `authenticator`, every token is refused (deny by default). The
    writes act as each token's principal through `acting` (by default `store` itself)."""
    from qinglong_dispatcher.web import auth, context, events, limits, server
    from qinglong_dispatcher.web.ui import sessions

    address = settings.api_address
    assert address is not None
    tls = None
    if settings.api_tls_cert_file is not None and settings.api_tls_key_file is not None:
        tls = server.tls_context(
            settings.api_tls_cert_file, settings.api_tls_key_file, settings.api_client_ca_file
        )
    hub = events.Hub(
        max_subscribers=max(1, settings.api_max_connections // 4),
        heartbeat_s=events.HEARTBEAT_S if heartbeat_s is None else heartbeat_s,
        poll_s=events.POLL_S if events_poll_s is None else events_poll_s,
    )
    ctx = context.Context(
        store=store,
        clock=clock,
        authenticator=auth.NoTokens() if authenticator is None else authenticator,
        metrics=the_metrics,
        health=health,
        profile=settings.profile,
        max_body_bytes=settings.api_max_body_bytes,
        read_timeout_s=settings.api_read_timeout_seconds,
        hub=hub,
        writes=limits.write_limiter(
            rate=settings.api_writes_per_second, burst=settings.api_write_burst
        ),
        shown=plan_preview_fields(),
        acting=acting,
        policy=api.Policy(
            approval_ttl_ms=int(settings.approval_ttl_seconds * 1000),
            max_attempts=settings.max_attempts,
        ),
        plan_models=action_plan_models,
        ui_sessions=sessions.Sessions(
            idle_s=settings.ui_idle_timeout_seconds,
            lifetime_s=settings.ui_session_lifetime_seconds,
        ),
    )
    return server.ApiServer(
        address=address, ctx=ctx, max_connections=settings.api_max_connections, tls=tls
    )


def policy(settings: Settings) -> api.Policy:
    """What the use cases take from the settings: a request's lifetime, a dispatch's attempts."""
    return api.Policy(
        approval_ttl_ms=int(settings.approval_ttl_seconds * 1000),
        max_attempts=settings.max_attempts,
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
        installed_plan_models=action_plan_models,
    )


def plan_preview_fields() -> plan_previews.ShownFields:
    """The members a redacted preview shows as they are, per action type: every model this
    process knows (built-in and installed), each without its `SENSITIVE_FIELDS`."""
    return plan_previews.shown_by_type(action_plan_models())


def action_plan_models() -> plans.PlanModels:
    """The plan models of the built-in actions and of the installed ones (entry points)."""
    from qinglong_dispatcher.actions import builtin, registry

    return {**builtin.PLAN_MODELS, **registry.installed().plan_models}


def os_user() -> str:
    """The OS user running this command: the default operator name a CLI write records."""
    from qinglong_dispatcher.adapters.sqlite import os_user as os_users

    return os_users.os_principal()


def write_plan_keys(path: Path, *, add: bool) -> tuple[str, int]:
    """`keys generate`: a new ring at `path` (refused if one is there), or with `add` a new
    active key in the ring at `path`; the active key id and how many keys the ring holds."""
    ring = plan_keyring.add_key(path) if add else plan_keyring.generate(path)
    return ring.active, len(ring.ids)


def backup_edge(settings: Settings, out: Path) -> int:
    """`backup`: the live SQLite file copied to the new file `out`; the bytes written."""
    from qinglong_dispatcher.adapters.sqlite import backup  # edge only: never on a cluster

    return backup.backup(
        settings.sqlite_path, out, busy_timeout_s=settings.sqlite_busy_timeout_seconds
    )


async def open_api_writer(settings: Settings) -> ports.Store | None:
    """The store of `QINGLONG_API_DATABASE_URL` (the API's NOINHERIT login, cluster), whose
    transactions become each token's principal; None when unset (the daemon's store acts)."""
    if settings.api_database_url is None:
        return None
    api_settings = settings.model_copy(update={"database_url": settings.api_database_url})
    return await _dialect(settings).open_store(api_settings, create=False)
