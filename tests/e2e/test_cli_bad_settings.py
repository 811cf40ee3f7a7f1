"""Every setting, out of range or garbage, from the environment or a config file: one line
naming the setting and exit 78 (never 70: a value that overflows later is refused at load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qinglong_dispatcher.config.settings import Settings, env_name
from tests.support.cli import error_lines, run_cli

# One bad value per field, chosen where it used to slip through the load: huge durations
# overflowed the milliseconds and timers (exit 70), so the durations get 1e308 or 1e20.
BAD: dict[str, str] = {
    "profile": "mars",
    "database_url": "mysql://db/x",
    "cadence_seconds": "nan",
    "page_size": "65",
    "passage_page_size": "0",
    "max_pages_per_tick": "9" * 30,
    "concurrency": "-1",
    "lease_seconds": "1e308",
    "max_attempts": "1001",
    "reconcile_seconds": "-inf",
    "shutdown_grace_seconds": "inf",
    "metrics_host": "no such host",
    "metrics_port": "65536",
    "owner_id": "has space",
    "log_format": "xml",
    "log_level": "loud",
    "execute_timeout_seconds": "1e20",
    "retry_backoff_seconds": "1e308",
    "sqlite_busy_timeout_seconds": "1e308",
    "sqlite_reserve_mib": "-1",
    "approval_ttl_seconds": "1e20",
    "self_approval": "maybe",
    "api_self_approval": "maybe",
    "installation": "Shop-EU",
    "allow_async_commit": "maybe",
    "require_sync_standby": "maybe",
    "max_clock_skew_seconds": "0",
    "tool_sandbox_dir": "",  # no bad text exists; the config file gives it a number below
    "receivers_file": "/nonexistent/receivers.toml",
    "commands_file": "/nonexistent/commands.toml",
    "mcp_servers_file": "/nonexistent/mcp-servers.toml",
    "plan_keyring_file": "/nonexistent/plan-keys",
    "plan_keyring_group_readable": "maybe",
    "wakeup_on_submit": "maybe",
    "notify_deliver": "maybe",
    "retention_days": "1e308",
    "audit_retention_days": "12 months",
    "api_listen": "0.0.0.0:8443",  # off loopback without TLS
    "api_tls_cert_file": "/nonexistent/cert.pem",
    "api_tls_key_file": "/nonexistent/key.pem",
    "api_client_ca_file": "/nonexistent/ca.pem",
    "oidc_file": "/nonexistent/oidc.toml",
    "api_database_url": "sqlite:///not-a-login.db",
    "api_max_connections": "0",
    "api_max_body_bytes": "256 KiB",
    "api_read_timeout_seconds": "1e308",
    "api_writes_per_second": "0",
    "api_write_burst": "lots",
    "ui_idle_timeout_seconds": "0",
    "ui_session_lifetime_seconds": "forever",
    "public_url": "ftp://ql.example",
}
TOML_ONLY = {"tool_sandbox_dir": "7"}
"""A raw TOML value where a string cannot be wrong."""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("settings")
    assert run_cli("migrate", cwd=path).returncode == 0
    return path


def test_the_table_covers_every_setting() -> None:
    assert set(BAD) == set(Settings.model_fields)


def _command(field: str) -> tuple[str, ...]:
    # The listener's host is only resolved by the daemon; everything else fails at load.
    return ("run",) if field == "metrics_host" else ("health",)


def _assert_refused(result_stderr: str, code: int, field: str) -> None:
    assert code == 78, (code, result_stderr)
    lines = error_lines(result_stderr)  # the daemon logs JSON events before it fails
    assert len(lines) == 1, result_stderr
    assert "Traceback" not in result_stderr
    named = "QINGLONG_METRICS_PORT" if field == "metrics_host" else env_name(field)
    assert named in lines[0]


@pytest.mark.parametrize("field", [f for f in BAD if BAD[f]])
def test_a_bad_environment_value_is_one_line_naming_it_and_exit_78(
    workdir: Path, field: str
) -> None:
    env = {"QINGLONG_METRICS_PORT": "0", env_name(field): BAD[field]}
    result = run_cli(*_command(field), cwd=workdir, env=env, timeout=30)
    _assert_refused(result.stderr, result.returncode, field)


@pytest.mark.slow
@pytest.mark.parametrize("field", list(BAD))
def test_a_bad_config_file_value_is_one_line_naming_it_and_exit_78(
    workdir: Path, field: str
) -> None:
    config = workdir / f"{field}.toml"
    literal = TOML_ONLY.get(field) or json.dumps(BAD[field])  # a JSON string is a TOML one
    port = "" if field == "metrics_port" else "metrics_port = 0\n"  # a free port, never 9464
    config.write_text(f"{port}{field} = {literal}\n", encoding="utf-8")
    result = run_cli("--config", str(config), *_command(field), cwd=workdir, timeout=30)
    _assert_refused(result.stderr, result.returncode, field)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "text"),
    [
        ("receivers_file", '[receivers.orders]\nbase_url = "ftp://example.test"\n'),
        ("commands_file", '[commands.reload]\nexecutable = "/nonexistent/tool"\n'),
        ("mcp_servers_file", '[servers.tickets]\nurl = "http://example.test/mcp"\ntools = ["t"]\n'),
    ],
)
def test_a_broken_actions_file_stops_the_daemon_in_one_line_with_exit_78(
    workdir: Path, setting: str, text: str
) -> None:
    config = workdir / f"broken-{setting}.toml"
    config.write_text(text, encoding="utf-8")
    env = {"QINGLONG_METRICS_PORT": "0", env_name(setting): str(config)}
    result = run_cli("tick", "--once", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert config.name in line


def test_a_command_whose_timeout_reaches_the_execute_timeout_stops_the_daemon(
    workdir: Path,
) -> None:
    config = workdir / "slow-commands.toml"
    config.write_text(
        '[commands.reload]\nexecutable = "/bin/true"\ntimeout_seconds = 20\n', encoding="utf-8"
    )
    env = {
        "QINGLONG_METRICS_PORT": "0",
        "QINGLONG_COMMANDS_FILE": str(config),
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "15",
    }
    result = run_cli("tick", "--once", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "commands.reload.timeout_seconds must be below the execute timeout" in line


def test_an_mcp_server_whose_timeouts_leave_no_room_to_close_stops_the_daemon(
    workdir: Path,
) -> None:
    config = workdir / "slow-mcp.toml"
    config.write_text(
        '[servers.s]\nurl = "https://mcp.test/"\ntools = ["t"]\ncall_timeout_seconds = 10\n',
        encoding="utf-8",
    )
    env = {
        "QINGLONG_METRICS_PORT": "0",
        "QINGLONG_MCP_SERVERS_FILE": str(config),
        "QINGLONG_EXECUTE_TIMEOUT_SECONDS": "15",
    }
    result = run_cli("tick", "--once", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "servers.s: connect, initialize and call timeouts" in line


_DEEP = 5_000
"""Nesting far past tomllib's recursion limit (it raised RecursionError: exit 70)."""
_NESTED = {
    "array": "a = " + "[" * _DEEP + "]" * _DEEP + "\n",
    "inline_table": "a = " + "{b = " * _DEEP + "1" + "}" * _DEEP + "\n",
}


@pytest.mark.parametrize("shape", list(_NESTED))
def test_a_config_file_nested_5000_levels_is_one_line_and_exit_78(
    workdir: Path, shape: str
) -> None:
    config = workdir / f"nested-{shape}.toml"
    config.write_text(_NESTED[shape], encoding="utf-8")
    result = run_cli("--config", str(config), "health", cwd=workdir, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert config.name in line
    assert "nested too deeply" in line


@pytest.mark.parametrize(
    "setting", ["receivers_file", "commands_file", "mcp_servers_file", "plan_keyring_file"]
)
def test_a_nested_actions_or_key_file_stops_tick_in_one_line_with_exit_78(
    workdir: Path, setting: str
) -> None:
    nested = workdir / f"nested-{setting}.toml"
    nested.write_text(_NESTED["array"], encoding="utf-8")
    nested.chmod(0o600)  # a key ring must be private; the others do not mind
    env = {"QINGLONG_METRICS_PORT": "0", env_name(setting): str(nested)}
    result = run_cli("tick", "--once", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert nested.name in line
    assert "nested too deeply" in line


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:99999/db",
        "postgresql://u:secret-pw@h1:5432,h2:70000/db",
        "postgresql://u@[::1]:99999/db",
        "postgresql://u@127.0.0.1/db?port=99999",
        "postgresql://u@127.0.0.1:0/db",
        "postgresql://u@127.0.0.1:" + "9" * 5000 + "/db",  # past int()'s digit limit
    ],
)
def test_a_database_port_out_of_range_is_one_line_and_exit_78_not_70(
    workdir: Path, url: str
) -> None:
    # It used to reach the socket layer as OverflowError: "internal error", exit 70.
    env = {"QINGLONG_PROFILE": "cluster", "QINGLONG_DATABASE_URL": url}
    result = run_cli("health", cwd=workdir, env=env, timeout=30)
    assert result.returncode == 78, result.stderr
    (line,) = error_lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert "QINGLONG_DATABASE_URL: the port must be between 1 and 65535" in line
    assert "secret-pw" not in result.stderr
