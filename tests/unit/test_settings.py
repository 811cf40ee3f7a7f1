"""Settings: profile defaults, precedence of the layers, and one-line configuration errors."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pydantic_settings
import pytest

import qinglong_dispatcher
from qinglong_dispatcher import resources
from qinglong_dispatcher.config import settings
from qinglong_dispatcher.domain import errors

PG_URL = "postgresql://qinglong:secret@db.internal:5432/qinglong"
CLUSTER = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": PG_URL}


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "qinglong.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _error(**kwargs: Any) -> str:
    with pytest.raises(errors.ConfigurationError) as caught:
        settings.load_settings(**kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_edge_defaults() -> None:
    loaded = settings.load_settings(environ={})
    assert loaded.profile == "edge"
    assert loaded.database_url == "sqlite:///var/qinglong.db"
    assert loaded.dialect == "sqlite"
    assert (loaded.cadence_seconds, loaded.page_size, loaded.max_pages_per_tick) == (5.0, 16, 4)
    assert loaded.passage_page_size == 64
    assert (loaded.concurrency, loaded.lease_seconds, loaded.max_attempts) == (4, 30.0, 5)
    assert (loaded.reconcile_seconds, loaded.shutdown_grace_seconds) == (60.0, 20.0)
    assert (loaded.metrics_host, loaded.metrics_port) == ("127.0.0.1", 9464)
    assert (loaded.log_format, loaded.log_level) == ("json", "info")
    assert loaded.retry_backoff_seconds == 1.0
    assert loaded.sqlite_busy_timeout_seconds == 5.0
    assert loaded.approval_ttl_seconds == 86400.0
    assert loaded.self_approval is True
    assert loaded.api_self_approval is False
    assert loaded.tool_sandbox_dir == Path("var/tool-sandbox")
    assert loaded.owner_id.rsplit(":", 1)[1].isdigit()


def test_model_defaults_are_the_edge_profile() -> None:
    loaded = settings.load_settings(environ={})
    for name, field in settings.Settings.model_fields.items():
        if field.default_factory is None:
            assert getattr(loaded, name) == field.default, name


def test_cluster_defaults() -> None:
    loaded = settings.load_settings(environ={**CLUSTER, "HOSTNAME": "dispatcher-7f9c-x2"})
    assert loaded.profile == "cluster"
    assert loaded.dialect == "postgres"
    assert (loaded.cadence_seconds, loaded.page_size, loaded.max_pages_per_tick) == (1.0, 64, 16)
    assert (loaded.concurrency, loaded.reconcile_seconds, loaded.shutdown_grace_seconds) == (
        8,
        15.0,
        25.0,
    )
    assert (loaded.metrics_host, loaded.metrics_port) == ("0.0.0.0", 9464)
    assert loaded.allow_async_commit is False
    assert loaded.max_clock_skew_seconds == 2.0
    pod, pid, suffix = loaded.owner_id.split(":")
    assert (pod, pid) == ("dispatcher-7f9c-x2", str(os.getpid()))
    assert len(suffix) == 6
    assert loaded.tool_sandbox_dir is None


def test_profile_files_ship_beside_the_package() -> None:
    for name in ("edge", "cluster"):
        assert resources.profile_file(name).is_file()
    assert resources.migrations_dir("sqlite").name == "sqlite"
    assert resources.migrations_dir("postgres").parent.name == "migrations"


def test_profile_from_config_file(tmp_path: Path) -> None:
    config = _config(tmp_path, f'profile = "cluster"\ndatabase_url = "{PG_URL}"\n')
    assert settings.load_settings(config_file=config, environ={}).page_size == 64


def test_config_file_overrides_profile(tmp_path: Path) -> None:
    config = _config(tmp_path, "page_size = 8\nlog_level = 'DEBUG'\n")
    loaded = settings.load_settings(config_file=config, environ={})
    assert (loaded.page_size, loaded.log_level, loaded.concurrency) == (8, "debug", 4)


def test_env_overrides_config_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "page_size = 8\nconcurrency = 2\n")
    loaded = settings.load_settings(
        config_file=config, environ={"QINGLONG_PAGE_SIZE": "32", "QINGLONG_LOG_LEVEL": "Warning"}
    )
    assert (loaded.page_size, loaded.concurrency, loaded.log_level) == (32, 2, "warning")


def test_arguments_override_env() -> None:
    loaded = settings.load_settings(
        profile="edge",
        database_url="sqlite:///args.db",
        overrides={"page_size": 4, "concurrency": None},
        environ={
            "QINGLONG_PROFILE": "cluster",
            "QINGLONG_DATABASE_URL": PG_URL,
            "QINGLONG_PAGE_SIZE": "32",
            "QINGLONG_CONCURRENCY": "3",
        },
    )
    assert (loaded.profile, loaded.database_url) == ("edge", "sqlite:///args.db")
    assert loaded.page_size == 4
    assert loaded.concurrency == 3  # a None override is an unset flag


def test_empty_env_value_is_unset() -> None:
    assert settings.load_settings(environ={"QINGLONG_PAGE_SIZE": ""}).page_size == 16


def test_settings_are_frozen() -> None:
    loaded = settings.load_settings(environ={})
    with pytest.raises(ValueError, match="frozen"):
        loaded.page_size = 3  # type: ignore[misc]  # assigning a frozen field is what is tested


def test_page_size_out_of_range_is_one_line() -> None:
    message = _error(environ={"QINGLONG_PAGE_SIZE": "65"})
    assert message == "QINGLONG_PAGE_SIZE: must be between 1 and 64 (got 65)"


def test_a_passage_page_of_its_own_is_set_and_bounded_like_the_page() -> None:
    loaded = settings.load_settings(environ={"QINGLONG_PASSAGE_PAGE_SIZE": "8"})
    assert (loaded.page_size, loaded.passage_page_size) == (16, 8)
    message = _error(environ={"QINGLONG_PASSAGE_PAGE_SIZE": "0"})
    assert message == "QINGLONG_PASSAGE_PAGE_SIZE: must be between 1 and 64 (got 0)"


def test_out_of_range_from_config_file_names_env_variable(tmp_path: Path) -> None:
    config = _config(tmp_path, "max_attempts = 0\n")
    assert _error(config_file=config, environ={}).startswith("QINGLONG_MAX_ATTEMPTS: ")


def test_lease_zero_rejected() -> None:
    message = _error(environ={"QINGLONG_LEASE_SECONDS": "0"})
    assert message == "QINGLONG_LEASE_SECONDS: must be greater than 0 (got 0)"


def test_not_a_number_rejected() -> None:
    assert _error(environ={"QINGLONG_CADENCE_SECONDS": "soon"}).startswith(
        "QINGLONG_CADENCE_SECONDS: must be a number"
    )


def test_unknown_profile_rejected() -> None:
    message = _error(profile="foo", environ={})
    assert message == "QINGLONG_PROFILE: must be edge or cluster (got 'foo')"
    assert _error(environ={"QINGLONG_PROFILE": "foo"}).startswith("QINGLONG_PROFILE: ")


def test_cluster_requires_database_url() -> None:
    message = _error(profile="cluster", environ={})
    assert message.startswith("QINGLONG_DATABASE_URL: required on the cluster profile")


def test_cluster_with_sqlite_url_rejected() -> None:
    message = _error(profile="cluster", database_url="sqlite:///x.db", environ={})
    assert message.startswith("QINGLONG_DATABASE_URL: ")
    assert "cluster" in message


def test_edge_with_postgres_url_rejected() -> None:
    message = _error(environ={"QINGLONG_DATABASE_URL": PG_URL})
    assert message.startswith("QINGLONG_DATABASE_URL: ")
    assert "edge" in message
    assert "secret" not in message


@pytest.mark.parametrize(
    "url", ["mysql://u:secret@h/db", "sqlite://x.db", "sqlite:///", "sqlite:///x.db?mode=ro"]
)
def test_malformed_database_url_rejected(url: str) -> None:
    message = _error(database_url=url, environ={})
    assert message.startswith("QINGLONG_DATABASE_URL: ")
    assert "secret" not in message


def test_sqlite_path_relative_and_absolute() -> None:
    relative = settings.load_settings(database_url="sqlite:///relative.db", environ={})
    assert relative.sqlite_path == Path("relative.db")
    assert not relative.sqlite_path.is_absolute()
    absolute = settings.load_settings(database_url="sqlite:////abs/path.db", environ={})
    assert absolute.sqlite_path == Path("/abs/path.db")


def test_sqlite_path_of_postgres_url_is_an_error() -> None:
    loaded = settings.load_settings(environ=CLUSTER)
    with pytest.raises(errors.ConfigurationError):
        _ = loaded.sqlite_path
    assert "secret" not in loaded.redacted_database_url
    assert loaded.redacted_database_url.startswith("postgresql://qinglong:***@")


def test_postgres_scheme_alias_accepted() -> None:
    loaded = settings.load_settings(profile="cluster", database_url="postgres://h/db", environ={})
    assert loaded.dialect == "postgres"


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("0", False), ("true", True)])
def test_self_approval_from_env(value: str, expected: bool) -> None:
    loaded = settings.load_settings(environ={"QINGLONG_SELF_APPROVAL": value})
    assert loaded.self_approval is expected


def test_self_approval_from_config_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "self_approval = false\n")
    assert settings.load_settings(config_file=config, environ={}).self_approval is False


def test_self_approval_not_a_boolean_is_one_line() -> None:
    message = _error(environ={"QINGLONG_SELF_APPROVAL": "maybe"})
    assert message.startswith("QINGLONG_SELF_APPROVAL: must be true or false")


def test_self_approval_off_on_cluster_is_refused_not_ignored() -> None:
    # On PostgreSQL the database decides (qinglong_self_approver); a setting would be a lie.
    message = _error(environ={**CLUSTER, "QINGLONG_SELF_APPROVAL": "false"})
    assert message.startswith("QINGLONG_SELF_APPROVAL: applies to the edge profile only")
    assert settings.load_settings(environ=CLUSTER).self_approval is True


def test_api_self_approval_is_off_on_both_profiles_and_only_edge_may_turn_it_on() -> None:
    # A token's principal keeps separation of duties by default, as a principal role that
    # holds no _self_approver does on PostgreSQL; there the grant, not a setting, turns it on.
    assert settings.load_settings(environ={}).api_self_approval is False
    assert settings.load_settings(environ=CLUSTER).api_self_approval is False
    on = settings.load_settings(environ={"QINGLONG_API_SELF_APPROVAL": "true"})
    assert on.api_self_approval is True
    message = _error(environ={**CLUSTER, "QINGLONG_API_SELF_APPROVAL": "true"})
    assert message.startswith("QINGLONG_API_SELF_APPROVAL: applies to the edge profile only")


def test_execute_timeout_defaults_to_half_the_lease() -> None:
    loaded = settings.load_settings(environ={"QINGLONG_LEASE_SECONDS": "12"})
    assert loaded.execute_timeout_seconds is None
    assert loaded.execute_timeout == 6.0
    assert loaded.lease_ms == 12_000


def test_execute_timeout_explicit_below_lease() -> None:
    loaded = settings.load_settings(environ={"QINGLONG_EXECUTE_TIMEOUT_SECONDS": "29.5"})
    assert loaded.execute_timeout == 29.5


@pytest.mark.parametrize("timeout", ["30", "45"])
def test_execute_timeout_not_below_lease_rejected(timeout: str) -> None:
    message = _error(environ={"QINGLONG_EXECUTE_TIMEOUT_SECONDS": timeout})
    assert message.startswith("QINGLONG_EXECUTE_TIMEOUT_SECONDS: must be below")


def test_fractional_durations_accepted() -> None:
    loaded = settings.load_settings(
        environ={"QINGLONG_CADENCE_SECONDS": "0.05", "QINGLONG_LEASE_SECONDS": "0.5"}
    )
    assert loaded.cadence_seconds == 0.05
    assert loaded.execute_timeout == 0.25
    assert loaded.lease_ms == 500


def test_owner_id_validated() -> None:
    assert settings.load_settings(environ={"QINGLONG_OWNER_ID": "node-1:42"}).owner_id == (
        "node-1:42"
    )
    assert _error(environ={"QINGLONG_OWNER_ID": "bad owner"}).startswith("QINGLONG_OWNER_ID: ")


def test_unknown_config_key_named(tmp_path: Path) -> None:
    config = _config(tmp_path, "pag_size = 8\n")
    message = _error(config_file=config, environ={})
    assert "'pag_size'" in message
    assert str(config) in message


def test_broken_toml_names_the_file(tmp_path: Path) -> None:
    config = _config(tmp_path, "page_size = = 8\n")
    message = _error(config_file=config, environ={})
    assert str(config) in message
    assert "Traceback" not in message


def test_missing_config_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    assert str(missing) in _error(config_file=missing, environ={})


def test_unknown_override_rejected() -> None:
    assert "'pages'" in _error(environ={}, overrides={"pages": 3})


def test_config_file_that_is_a_folder_names_it(tmp_path: Path) -> None:
    assert str(tmp_path) in _error(config_file=tmp_path, environ={})


def test_environ_argument_replaces_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QINGLONG_PAGE_SIZE", "3")
    assert settings.load_settings(environ={}).page_size == 16
    assert settings.load_settings().page_size == 3


def test_env_names_match_without_case() -> None:
    assert settings.load_settings(environ={"qinglong_page_size": "8"}).page_size == 8


def _private_imports(path: Path) -> list[str]:
    """Imports in `path` of a library's private module or name, or below pydantic_settings."""
    public = set(pydantic_settings.__all__)
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "pydantic_settings" and node.attr not in public:
                found.append(f"pydantic_settings.{node.attr}")
            continue
        else:
            continue
        for module in modules:
            parts = module.split(".")
            # `_signal`: CPython's built-in module that `signal` wraps and re-exports, loaded
            # before any Python code runs; the console script uses it to be guarded from its
            # first line (`console.py`), not a library's internals that move between releases.
            ours = parts[0] in ("qinglong_dispatcher", "__future__", "_signal")
            if (parts[0] == "pydantic_settings" and len(parts) > 1) or (
                not ours and any(part.startswith("_") for part in parts)
            ):
                found.append(module)
            elif module == "pydantic_settings":
                found += [f"{module}.{name}" for name in names if name not in public]
            elif not ours:
                found += [f"{module}.{name}" for name in names if name.startswith("_")]
    return found


def test_package_uses_only_public_library_names() -> None:
    # pydantic_settings.sources.utils did not exist in the pinned minimum (2.3); its
    # internals move between releases, so only names in `pydantic_settings.__all__` are used.
    package = Path(qinglong_dispatcher.__file__).parent
    found = {
        f"{path.relative_to(package)}: {name}"
        for path in sorted(package.rglob("*.py"))
        for name in _private_imports(path)
    }
    assert found == set()


def test_private_import_check_sees_what_it_forbids(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pydantic_settings\n"
        "from pydantic_settings.sources import utils\n"
        "from pydantic._internal import _utils\n"
        "from pydantic_settings import BaseSettings, _private\n"
        "x = pydantic_settings.sources\n",
        encoding="utf-8",
    )
    assert sorted(_private_imports(sample)) == [
        "pydantic._internal",
        "pydantic_settings._private",
        "pydantic_settings.sources",
        "pydantic_settings.sources",
    ]


def test_two_cluster_processes_on_one_host_get_different_owner_ids() -> None:
    """`HOSTNAME` alone collides when replicas share a host outside Kubernetes."""
    environ = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": "postgresql://h/db"}
    first = settings.load_settings(environ={**environ, "HOSTNAME": "same"}).owner_id
    second = settings.load_settings(environ={**environ, "HOSTNAME": "same"}).owner_id
    assert first != second
    assert first.startswith("same:")
    assert second.startswith("same:")


def test_wakeup_on_submit_is_on_for_cluster_can_be_turned_off_and_is_refused_on_edge() -> None:
    assert settings.load_settings(environ=CLUSTER).wakeup_on_submit is True
    off = settings.load_settings(environ={**CLUSTER, "QINGLONG_WAKEUP_ON_SUBMIT": "false"})
    assert off.wakeup_on_submit is False
    assert settings.load_settings(environ={}).wakeup_on_submit is False
    message = _error(environ={"QINGLONG_WAKEUP_ON_SUBMIT": "true"})
    assert message.startswith("QINGLONG_WAKEUP_ON_SUBMIT: applies to the cluster profile only")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:5432/db",
        "postgresql://u:p%40ss@h1:5432,h2:5433/db?target_session_attrs=read-write",
        "postgresql://u@[::1]:65535/db",
        "postgresql://u@/db?host=/var/run/postgresql&port=5432",
        "postgresql://u@%2Fvar%2Frun%2Fpostgresql/db",
        "postgres://h/db",
    ],
)
def test_database_urls_with_ports_in_range_are_accepted(url: str) -> None:
    loaded = settings.load_settings(profile="cluster", database_url=url, environ={})
    assert loaded.dialect == "postgres"
