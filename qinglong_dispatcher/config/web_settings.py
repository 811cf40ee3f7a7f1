"""The settings of the control-plane API and the operator UI, a part of `settings.Settings`.

They are read, layered and refused exactly like the core's (the same `QINGLONG_*` names and
config-file keys); they live here because they change with the web side, not the dispatcher.
A check that needs the profile (`refusal`) is called by the whole model's own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

from qinglong_dispatcher.config import database_urls, files, listen_address


class WebSettings(BaseModel):
    """The API's listener, TLS, login and limits; the UI's sessions and its public address."""

    api_listen: listen_address.Setting = Field(
        None, description="the control-plane API: host:port, [v6]:port or unix:/path (unset: off)"
    )
    api_tls_cert_file: Path | None = Field(
        None, description="API: the server certificate chain (PEM); required off loopback"
    )
    api_tls_key_file: Path | None = Field(None, description="API: the certificate's key (PEM)")
    api_client_ca_file: Path | None = Field(
        None, description="API: CA certificates a client certificate must chain to (mTLS)"
    )
    api_database_url: str | None = Field(
        None, description="cluster API: the _api role's login; its writes act as each principal"
    )
    api_max_connections: int = Field(64, ge=1, le=10_000, description="API: connections at most")
    api_max_body_bytes: int = Field(
        256 * 1024, ge=1024, le=16 * 1024 * 1024, description="API: request body cap"
    )
    api_read_timeout_seconds: float = Field(
        10.0, gt=0, le=300, description="API: a request's headers and body arrive within this"
    )
    api_writes_per_second: float = Field(
        2.0, gt=0, le=1_000_000, description="API: each principal's sustained write rate"
    )
    api_write_burst: int = Field(30, ge=1, le=1_000_000, description="API: writes at once")
    ui_idle_timeout_seconds: float = Field(
        900.0, gt=0, le=86_400, description="operator UI: a session unused this long ends"
    )
    oidc_file: Path | None = Field(
        None, description="operator UI: OIDC sign-in (provider, client, group mapping; TOML)"
    )
    ui_session_lifetime_seconds: float = Field(
        28_800.0, gt=0, le=604_800, description="operator UI: no session lives longer"
    )
    public_url: str | None = Field(
        None,
        description="the address people reach the operator UI at (https://host[/path]), for "
        "the links a notification carries (unset: no links)",
    )

    @field_validator("api_tls_cert_file", "api_tls_key_file", "api_client_ca_file", "oidc_file")
    @classmethod
    def _web_file(cls, value: Path | None) -> Path | None:
        # Named apart from the whole model's own check: a validator of the same name there
        # would replace this one.
        return files.regular_file(value)

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str | None) -> str | None:
        # Never echoed: an address with a user and password in it is a secret in a log.
        if value is None:
            return None
        parts = urlsplit(value)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.username is not None
            or parts.query
            or parts.fragment
            or any(c.isspace() for c in value)
            or len(value) > 512
        ):
            raise ValueError(
                "must be an http:// or https:// address without a user, query or fragment "
                "(at most 512 characters)"
            )
        return value.rstrip("/")

    @property
    def api_address(self) -> listen_address.ListenAddress | None:
        """Where the control-plane API listens (None: it is off)."""
        return None if self.api_listen is None else listen_address.parse(self.api_listen)


def refusal(settings: WebSettings, profile: str, name: Callable[[str], str]) -> str:
    """Why the web settings are refused on `profile` ("" when they are fine); `name` names a
    setting as the user sets it."""
    if settings.api_database_url is not None and (
        profile != "cluster" or database_urls.split(settings.api_database_url)[0] != "postgres"
    ):
        return (
            f"{name('api_database_url')}: a postgresql://… login of the cluster profile "
            f"(got {database_urls.redact(settings.api_database_url)!r}); on edge the file's "
            "owner writes for the API"
        )
    return listen_address.tls_refusal(settings, name)
