"""Validated runtime settings: profile defaults < config file < QINGLONG_* env < CLI flags."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field, ValidationError, create_model, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from qinglong_dispatcher import resources
from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.settings import ActionSettings
from qinglong_dispatcher.config import (
    database_urls,
    defaults,
    environment,
    files,
    messages,
    url_file,
    web_settings,
)
from qinglong_dispatcher.domain import errors

ENV_PREFIX = "QINGLONG_"
"""Prefix of every environment variable that sets a field (`QINGLONG_PAGE_SIZE`)."""

Profile = Literal["edge", "cluster"]
LogFormat = Literal["json", "console"]
LogLevel = Literal["debug", "info", "warning", "error"]

_OWNER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

# Upper bounds of the durations: beyond them a value is a typo, and an unbounded one (1e308)
# overflows the milliseconds stored and the timers armed with it (exit 70, not 78).
_HOUR, _DAY, _YEAR, _CENTURY_DAYS = 3600, 86400, 366 * 86400, 36500


def env_name(field: str) -> str:
    """Return the environment variable that sets `field` (`page_size` → `QINGLONG_PAGE_SIZE`)."""
    return f"{ENV_PREFIX}{field.upper()}"


if TYPE_CHECKING:
    _ActionFields = ActionSettings
else:
    # The built-in actions' own settings (each model in its action's package) are fields of
    # this model too, read and checked like the rest; the composition root hands each action
    # its own (`actions.builtin.own_settings`). Only the core's fields are typed here.
    _ActionFields = create_model("_ActionFields", __base__=builtin.SETTINGS)


class Settings(BaseSettings, _ActionFields, web_settings.WebSettings):
    """Every knob of the dispatcher, validated once at startup; defaults are the edge profile.

    The API's and the UI's own settings are declared in `web_settings`, the built-in actions'
    in their packages; all are fields of this one model."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
    )

    # `profile` comes first: the owner id and sandbox defaults below read it.
    profile: Profile = Field("edge", description="edge or cluster")
    database_url: str = Field("sqlite:///var/qinglong.db", description="store URL")
    cadence_seconds: float = Field(5.0, gt=0, le=_HOUR, description="dispatch tick interval")
    page_size: int = Field(16, ge=1, le=64, description="due page size")
    passage_page_size: int = Field(
        64, ge=1, le=64, description="rows one transactional action's passage commits at once"
    )
    max_pages_per_tick: int = Field(4, ge=1, le=10_000, description="page cap per tick")
    concurrency: int = Field(4, ge=1, le=1024, description="executes in flight")
    lease_seconds: float = Field(30.0, gt=0, le=_DAY, description="lease length")
    max_attempts: int = Field(5, ge=1, le=1000, description="claim budget")
    reconcile_seconds: float = Field(60.0, gt=0, le=_DAY, description="recovery pass interval")
    shutdown_grace_seconds: float = Field(20.0, ge=0, le=_HOUR, description="drain time on SIGTERM")
    metrics_host: str = Field("127.0.0.1", description="metrics + health listener host")
    metrics_port: int = Field(9464, ge=0, le=65535, description="metrics + health listener port")
    owner_id: str = Field(default_factory=defaults.owner_id, description="lease owner name")
    log_format: LogFormat = Field(
        default_factory=defaults.log_format,
        description="json or console (default: console when stderr is a terminal, else json)",
    )
    log_level: LogLevel = Field("info", description="debug, info, warning or error")
    execute_timeout_seconds: float | None = Field(
        None, gt=0, le=_DAY, description="bound on one execute, below the lease (default lease / 2)"
    )
    retry_backoff_seconds: float = Field(
        1.0, gt=0, le=_HOUR, description="first pre-barrier retry wait"
    )
    sqlite_busy_timeout_seconds: float = Field(
        5.0, ge=0, le=_HOUR, description="SQLite busy timeout"
    )
    sqlite_reserve_mib: int = Field(
        8, ge=0, le=4096, description="SQLite: MiB of ballast given up on a full disk (0: none)"
    )
    # The database refuses a lifetime beyond 30 days (migration 0011): say so at startup.
    approval_ttl_seconds: float = Field(
        86400.0, gt=0, le=30 * 86400, description="approval lifetime"
    )
    self_approval: bool = Field(
        True,
        description="SQLite: may the OS user approve its own requests (PostgreSQL decides by "
        "the installation's self_approver role)",
    )
    api_self_approval: bool = Field(
        False,  # as on PostgreSQL, where a principal's role holds no _self_approver by default
        description="SQLite: may an API token's principal approve requests it made itself",
    )
    installation: str | None = Field(
        None,
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description="cluster: the installation a new database is migrated for, naming its "
        "roles <installation>_runtime, … (default: the database's name)",
    )
    allow_async_commit: bool = Field(False, description="accept synchronous_commit off/local")
    require_sync_standby: bool = Field(
        False,
        description="cluster: refuse to start, and fail readiness, unless the primary has a "
        "synchronous standby and synchronous_commit is on or remote_apply",
    )
    max_clock_skew_seconds: float = Field(2.0, gt=0, le=_HOUR, description="skew guard bound")
    tool_sandbox_dir: Path | None = Field(
        default_factory=defaults.tool_sandbox, description="root for builtin.file.write"
    )
    plan_keyring_file: Path | None = Field(
        default_factory=defaults.plan_keyring,
        description="the plan key ring: plans are encrypted at rest under its active key "
        "(default: $CREDENTIALS_DIRECTORY/plan-keys when that file exists; none: plans in clear)",
    )
    plan_keyring_group_readable: bool = Field(
        False,
        description="accept a plan key ring its group may read (never write; never others): "
        "a Kubernetes Secret volume under fsGroup",
    )
    wakeup_on_submit: bool = Field(
        False,
        description="cluster: LISTEN for consumed approvals and tick at once (the cadence "
        "stays the fallback); edge has one process and no listener",
    )
    notify_deliver: bool = Field(
        True,
        description="deliver the notification outbox to its subscriptions (one deliverer per "
        "database by lease; off: events wait)",
    )
    retention_days: float = Field(
        14.0,
        ge=0,
        le=_CENTURY_DAYS,
        description="edge: the daemon prunes finished dispatch trees older than this on the "
        "reconcile cadence (0: never); the cluster's prune CronJob does it there",
    )
    audit_retention_days: float = Field(
        365.0,
        gt=0,
        le=_CENTURY_DAYS,
        description="security audit records are pruned older than this",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only the keyword arguments: `load_settings` layers env and files per call."""
        # A classmethod cannot see one call's environ and config file, and the default env
        # source would read os.environ behind a caller's explicit `environ`.
        return (init_settings,)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("plan_keyring_file")
    @classmethod
    def _core_file(cls, value: Path | None) -> Path | None:
        return files.regular_file(value)

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        database_urls.split(value)
        return value

    @field_validator("owner_id")
    @classmethod
    def _check_owner_id(cls, value: str) -> str:
        if not _OWNER_ID.fullmatch(value):
            raise ValueError(f"must match {_OWNER_ID.pattern} (got {value!r})")
        return value

    @model_validator(mode="after")
    def _check_together(self) -> Settings:
        url = env_name("database_url")
        if self.profile == "cluster" and "database_url" not in self.model_fields_set:
            raise ValueError(f"{url}: required on the cluster profile (postgresql://…)")
        if self.profile == "cluster" and self.dialect == "sqlite":
            raise ValueError(
                f"{url}: the cluster profile needs postgresql://…, not a SQLite URL "
                "(replicas must never share one SQLite file)"
            )
        if self.profile == "edge" and self.dialect == "postgres":
            raise ValueError(
                f"{url}: the edge profile needs sqlite:///…, not a PostgreSQL URL "
                "(use the cluster profile)"
            )
        if self.profile == "cluster" and (self.api_self_approval or not self.self_approval):
            # Refused rather than ignored: on PostgreSQL the database alone decides.
            name, fix = ("api_", "grant") if self.api_self_approval else ("", "revoke")
            raise ValueError(
                f"{env_name(name + 'self_approval')}: applies to the edge profile only; on "
                f"PostgreSQL self-approval is the installation's _self_approver role ({fix} it)"
            )
        if self.profile == "edge" and self.require_sync_standby:
            raise ValueError(
                f"{env_name('require_sync_standby')}: applies to the cluster profile only "
                "(edge has one SQLite file and no standby)"
            )
        if self.require_sync_standby and self.allow_async_commit:
            raise ValueError(
                f"{env_name('require_sync_standby')} and {env_name('allow_async_commit')} "
                "contradict each other: choose one"
            )
        if self.profile == "edge" and self.wakeup_on_submit:
            raise ValueError(
                f"{env_name('wakeup_on_submit')}: applies to the cluster profile only (edge "
                "has one process: its cadence is its only wake-up)"
            )
        if self.profile == "cluster" and self.retention_days > 0:
            raise ValueError(
                f"{env_name('retention_days')}: applies to the edge profile only (the runtime "
                "login may not delete: run the prune CronJob as a member of the installation's "
                "_pruner role)"
            )
        if self.audit_retention_days < self.retention_days:
            raise ValueError(
                f"{env_name('audit_retention_days')}: must be at least "
                f"{env_name('retention_days')} ({self.retention_days:g}) "
                f"(got {self.audit_retention_days:g})"
            )
        if web := web_settings.refusal(self, self.profile, env_name):
            raise ValueError(web)
        timeout = self.execute_timeout_seconds
        if timeout is not None and timeout >= self.lease_seconds:
            raise ValueError(
                f"{env_name('execute_timeout_seconds')}: must be below "
                f"{env_name('lease_seconds')} ({self.lease_seconds:g}) (got {timeout:g})"
            )
        return self

    @property
    def dialect(self) -> resources.Dialect:
        """`sqlite` or `postgres`, from the database URL."""
        return database_urls.split(self.database_url)[0]

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file: relative for `sqlite:///x.db`, absolute for `sqlite:////x.db`."""
        path = database_urls.split(self.database_url)[1]
        if path is None:
            raise errors.ConfigurationError(f"{env_name('database_url')}: not a SQLite URL")
        return path

    @property
    def redacted_database_url(self) -> str:
        """The database URL with any password masked, for logs and status output."""
        return database_urls.redact(self.database_url)

    @property
    def execute_timeout(self) -> float:
        """Seconds one execute may take: the configured value, else half the lease."""
        if self.execute_timeout_seconds is not None:
            return self.execute_timeout_seconds
        return self.lease_seconds / 2

    @property
    def lease_ms(self) -> int:
        """The lease length in whole milliseconds, as stored in `lease_expires_at_ms`."""
        return round(self.lease_seconds * 1000)


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """The fields set by `QINGLONG_*` variables of `environ`, names matched without case."""
    # The library's env source reads only os.environ; `environ` is an argument here. Every
    # field is a scalar, so the raw text is what that source would pass on too.
    named = {key.upper(): value for key, value in environ.items() if value != ""}
    return {
        field: named[env_name(field)] for field in Settings.model_fields if env_name(field) in named
    }


def load_settings(
    *,
    profile: str | None = None,
    config_file: Path | None = None,
    database_url: str | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Build the Settings of one process; raise ConfigurationError with one line on any fault.

    Precedence, highest first: the arguments (`profile`, `database_url`, `overrides`: the
    CLI flags; a None value in `overrides` counts as an unset flag), `QINGLONG_*` variables
    of `environ` (default `os.environ`), `config_file`, the profile's `profiles/<name>.toml`,
    the model defaults. The profile itself is decided first, by the layers above its file:
    argument, `QINGLONG_PROFILE`, the config file's `profile` key, else `edge`.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    environment.refuse_unknown(env, map(env_name, Settings.model_fields))
    explicit: dict[str, Any] = {k: v for k, v in (overrides or {}).items() if v is not None}
    for key in explicit:
        if key not in Settings.model_fields:
            raise errors.ConfigurationError(f"unknown setting {key!r}")
    if profile is not None:
        explicit["profile"] = profile
    database_url = url_file.database_url(env, database_url)
    if database_url is not None:
        explicit["database_url"] = database_url

    config = files.layer(config_file, "config file", Settings) if config_file is not None else {}
    # Lowest first, so each layer overrides the ones before it.
    above_profile = {**config, **_env_layer(env), **explicit}
    chosen = above_profile.get("profile", "edge")
    if chosen not in get_args(Profile):
        raise errors.ConfigurationError(
            f"{env_name('profile')}: must be edge or cluster (got {messages.show(chosen)})"
        )
    name = str(chosen)
    from_profile = files.layer(resources.profile_file(name), "profile file", Settings)
    if name == "cluster":
        # The pod name comes from `environ`, which the model's default factory cannot see.
        from_profile.setdefault("owner_id", defaults.default_owner_id(name, env))

    try:
        return Settings(**{**from_profile, **above_profile})
    except ValidationError as exc:
        raise errors.ConfigurationError(
            messages.one_line(exc, Settings.model_fields, env_name)
        ) from exc
