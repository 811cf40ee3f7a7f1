"""Settings of a replicated cluster: a multi-host URL, and `QINGLONG_REQUIRE_SYNC_STANDBY`."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import errors

MULTI_HOST = (
    "postgresql://runtime:s3cret@127.0.0.1:5433,127.0.0.1:5434/qinglong"
    "?target_session_attrs=read-write"
)


def test_a_multi_host_url_is_accepted_and_redacted() -> None:
    settings = load_settings(profile="cluster", database_url=MULTI_HOST, environ={})
    assert settings.dialect == "postgres"
    assert settings.database_url == MULTI_HOST
    assert settings.redacted_database_url == (
        "postgresql://runtime:***@127.0.0.1:5433,127.0.0.1:5434/qinglong"
        "?target_session_attrs=read-write"
    )


def test_describe_url_names_every_host_and_no_password() -> None:
    from qinglong_dispatcher.adapters.postgres import driver_errors

    assert driver_errors.describe_url(MULTI_HOST) == "127.0.0.1:5433,127.0.0.1:5434/qinglong"


def test_require_sync_standby_is_read_from_the_environment() -> None:
    environ = {"QINGLONG_REQUIRE_SYNC_STANDBY": "true"}
    settings = load_settings(profile="cluster", database_url=MULTI_HOST, environ=environ)
    assert settings.require_sync_standby is True
    default = load_settings(profile="cluster", database_url=MULTI_HOST, environ={})
    assert default.require_sync_standby is False


def test_require_sync_standby_is_refused_on_edge_in_one_line() -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        load_settings(environ={"QINGLONG_REQUIRE_SYNC_STANDBY": "true"})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("QINGLONG_REQUIRE_SYNC_STANDBY: applies to the cluster profile")


def test_require_sync_standby_contradicts_allow_async_commit() -> None:
    environ = {"QINGLONG_REQUIRE_SYNC_STANDBY": "true", "QINGLONG_ALLOW_ASYNC_COMMIT": "true"}
    with pytest.raises(errors.ConfigurationError, match="contradict"):
        load_settings(profile="cluster", database_url=MULTI_HOST, environ=environ)


def test_readiness_fails_while_durability_does_not_hold() -> None:
    from qinglong_dispatcher.lifecycle import http

    health = http.Health(cadence_s=1.0)
    health.set_store(reachable=True, migrated=True)
    assert health.ready() == (True, "ready")
    health.set_durability("QINGLONG_REQUIRE_SYNC_STANDBY: PostgreSQL has no synchronous standby")
    ok, reason = health.ready()
    assert not ok
    assert reason.startswith("QINGLONG_REQUIRE_SYNC_STANDBY")
    assert health.alive()[0]  # liveness is another question: the loop still ticks
    health.set_durability("")
    assert health.ready() == (True, "ready")
