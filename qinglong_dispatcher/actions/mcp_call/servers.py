"""The `mcp.call` configuration: which MCP servers exist, how to reach them, what may be called.

Every server is a table `[servers.NAME]` holding either a stdio `command` (an argv started with
a scrubbed environment: listed variables and secrets by reference) or a streamable HTTP `url`
(TLS unless the host is a loopback address; headers, plain or secrets by reference), its
timeouts, its output cap, the tools a plan may name (names or `fnmatch` patterns) and, per
tool, the read-only check tool that may settle a lost answer. Every fault is one
`ConfigurationError` line naming the file, the server and the field; never a value.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import ipaddress
import math
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.actions.mcp_call import plan
from qinglong_dispatcher.domain import errors, plans

MAX_TIMEOUT_S: Final = 3600.0
DEFAULT_CONNECT_TIMEOUT_S: Final = 2.0
DEFAULT_INITIALIZE_TIMEOUT_S: Final = 2.0
DEFAULT_CALL_TIMEOUT_S: Final = 5.0
CLOSE_ALLOWANCE_S: Final = 4.5
"""What closing a stdio server may take (the SDK waits 2 s for it to exit, then 2 s after
SIGTERM before SIGKILL): an execute must still answer within its deadline after it."""
DEFAULT_OUTPUT_CAP_BYTES: Final = 64 * 1024
MAX_OUTPUT_CAP_BYTES: Final = 16 * 1024 * 1024

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]{0,4096}")
_PATTERN = re.compile(r"[A-Za-z0-9_.:/*?\[\]!-]{1,128}")
_LOCATION = re.compile(r"\(at line [0-9]+, column [0-9]+\)")
_NAME_RULE: Final = "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
# The transport's own headers, and those that would change where or how a request goes.
FORBIDDEN_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
_SERVER_KEYS: Final = frozenset(
    {
        "command",
        "cwd",
        "env",
        "env_secrets",
        "url",
        "headers",
        "header_secrets",
        "connect_timeout_seconds",
        "initialize_timeout_seconds",
        "call_timeout_seconds",
        "max_output_bytes",
        "tools",
        "checks",
    }
)
_CHECK_KEYS: Final = frozenset({"tool", "key_argument", "call_key_argument"})


class McpConfigInvalid(errors.ConfigurationError):
    """The `mcp.call` configuration is not valid."""

    code = "mcp_config_invalid"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """How a lost answer of one tool may be settled: the read-only `tool` called with the
    dispatch id as its `key_argument`; `call_key_argument`, when set, is the argument of the
    call itself that carries the dispatch id (it always travels in `_meta` too)."""

    tool: str
    key_argument: str = "key"
    call_key_argument: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Server:
    """One configured MCP server: exactly one of `command` and `url`."""

    name: str
    command: tuple[str, ...] = ()
    cwd: str = "/"
    env: tuple[str, ...] = ()
    env_secrets: tuple[tuple[str, secrets.SecretRef], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    header_secrets: tuple[tuple[str, secrets.SecretRef], ...] = ()
    connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_S
    initialize_timeout_seconds: float = DEFAULT_INITIALIZE_TIMEOUT_S
    call_timeout_seconds: float = DEFAULT_CALL_TIMEOUT_S
    max_output_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    tools: tuple[str, ...] = ()
    """Names or `fnmatch` patterns of the tools a plan may call."""
    checks: Mapping[str, Check] = dataclasses.field(default_factory=dict)

    @property
    def transport(self) -> str:
        """`stdio` or `http`."""
        return "http" if self.url is not None else "stdio"

    def allows(self, tool: str) -> bool:
        """Whether a plan may name `tool` (case-sensitive, whole-name patterns)."""
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)

    def setup_seconds(self) -> float:
        """The longest connect and initialize (with the tool listing) may take."""
        return self.connect_timeout_seconds + self.initialize_timeout_seconds


@dataclasses.dataclass(frozen=True, slots=True)
class ServerSet:
    """Every configured server by name."""

    servers: Mapping[str, Server]
    source: str = "mcp servers"

    def get(self, name: str) -> Server | None:
        """The server called `name`, or None."""
        return self.servers.get(name)

    def require_within(self, execute_timeout_s: float) -> None:
        """Refuse a server whose connect, initialize and call (and the closing of a stdio
        server) do not fit in the execute timeout: the dispatcher would cut an execute off
        mid-call, which ends `blocked` (indeterminate) instead of `uncertain`."""
        for name, server in self.servers.items():
            total = server.setup_seconds() + server.call_timeout_seconds + CLOSE_ALLOWANCE_S
            if total >= execute_timeout_s:
                raise McpConfigInvalid(
                    f"{self.source}: servers.{name}: connect, initialize and call timeouts "
                    f"plus {CLOSE_ALLOWANCE_S:g} s to close must be below the execute "
                    f"timeout ({execute_timeout_s:g} s)"
                )


class _Fields:
    """Reads one table's fields; every fault names `where.field`."""

    def __init__(self, source: str, where: str, table: object, allowed: frozenset[str]) -> None:
        self.source, self.where = source, where
        if not isinstance(table, dict):
            raise self.fault(None, "must be a table")
        for key in table:
            if key not in allowed:
                raise self.fault(key if _VARIABLE.fullmatch(key) else "?", "unknown field")
        self.table: dict[str, object] = table

    def fault(self, field: str | None, reason: str) -> McpConfigInvalid:
        where = f"{self.where}.{field}" if field else self.where
        return McpConfigInvalid(f"{self.source}: {where}: {reason}")

    def texts(self, field: str) -> tuple[str, ...]:
        value = self.table.get(field, [])
        if not isinstance(value, list) or not all(
            isinstance(item, str) and "\x00" not in item for item in value
        ):
            raise self.fault(field, "must be a list of strings without NUL")
        return tuple(value)

    def seconds(self, field: str, default: float) -> float:
        value = self.table.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fault(field, "must be a number of seconds")
        if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
            raise self.fault(field, f"must be > 0 and <= {MAX_TIMEOUT_S:g}")
        return float(value)

    def references(self, field: str) -> tuple[tuple[str, secrets.SecretRef], ...]:
        value = self.table.get(field, {})
        if not isinstance(value, dict):
            raise self.fault(field, "must be a table of NAME = reference")
        refs = []
        for name, ref in value.items():
            try:
                refs.append((name, secrets.SecretRef.parse(ref)))
            except ValueError as exc:  # its message names no value
                raise self.fault(f"{field}.?", str(exc)) from None
        return tuple(refs)


def _command(fields: _Fields) -> tuple[str, ...]:
    argv = fields.texts("command")
    if not argv or not os.path.isabs(argv[0]):
        raise fields.fault("command", "must name an absolute executable first")
    if not os.path.isfile(argv[0]) or not os.access(argv[0], os.X_OK):
        raise fields.fault("command", "does not start with an executable file")
    return argv


def _url(fields: _Fields) -> str:
    value = fields.table.get("url")
    if not isinstance(value, str):
        raise fields.fault("url", "must be a string")
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018  # raises ValueError for a port out of range
    except ValueError:
        raise fields.fault("url", "is not a URL") from None
    if parts.username is not None or parts.password is not None:
        raise fields.fault("url", "must not hold a user or password (use header_secrets)")
    if parts.query or parts.fragment or not parts.hostname:
        raise fields.fault("url", "must have a host and no query or fragment")
    if parts.scheme == "https":
        return value
    try:
        loopback = parts.scheme == "http" and ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise fields.fault("url", "must be https:// (http:// only to a loopback address)")
    return value


def _headers(
    fields: _Fields,
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, secrets.SecretRef], ...]]:
    plain = fields.table.get("headers", {})
    if not isinstance(plain, dict):
        raise fields.fault("headers", "must be a table of NAME = value")
    secret = fields.references("header_secrets")
    seen: set[str] = set()
    for name in [*plain, *(n for n, _ in secret)]:
        if not _HEADER_NAME.fullmatch(name) or name.lower() in FORBIDDEN_HEADERS:
            raise fields.fault("headers", "names a header that is not a token or not allowed")
        if name.lower() in seen:
            raise fields.fault("headers", "names a header twice")
        seen.add(name.lower())
    for value in plain.values():
        if not isinstance(value, str) or not _HEADER_VALUE.fullmatch(value):
            raise fields.fault("headers", "values must be printable ASCII")
    return tuple(plain.items()), secret


def _env(fields: _Fields) -> tuple[tuple[str, ...], tuple[tuple[str, secrets.SecretRef], ...]]:
    names = fields.texts("env")
    refs = fields.references("env_secrets")
    every = [*names, *(n for n, _ in refs)]
    if not all(_VARIABLE.fullmatch(n) for n in every) or len(set(every)) != len(every):
        raise fields.fault("env", "must list distinct variable names (env and env_secrets)")
    return names, refs


def _tools(fields: _Fields) -> tuple[str, ...]:
    tools = fields.texts("tools")
    if not tools or not all(_PATTERN.fullmatch(t) for t in tools):
        raise fields.fault("tools", "must list tool names or patterns")
    return tools


def _checks(fields: _Fields, tools: tuple[str, ...]) -> dict[str, Check]:
    value = fields.table.get("checks", {})
    if not isinstance(value, dict):
        raise fields.fault("checks", "must be a table of TOOL = { tool = … }")
    checks = {}
    for tool, table in value.items():
        where = f"{fields.where}.checks.{tool if plan.is_tool_name(tool) else '?'}"
        check = _Fields(fields.source, where, table, _CHECK_KEYS)
        name, key, call_key = (
            check.table.get(k) for k in ("tool", "key_argument", "call_key_argument")
        )
        if not isinstance(name, str) or not plan.is_tool_name(name):
            raise check.fault("tool", "must name the read-only check tool")
        if name == tool:
            raise check.fault("tool", "is the tool itself; a check must only look")
        for field, arg in (("key_argument", key), ("call_key_argument", call_key)):
            if arg is not None and not (isinstance(arg, str) and _VARIABLE.fullmatch(arg)):
                raise check.fault(field, "must be an argument name")
        if not any(fnmatch.fnmatchcase(tool, pattern) for pattern in tools):
            raise check.fault(None, "is for a tool the server's tools do not allow")
        checks[tool] = Check(
            tool=name,
            key_argument=key if isinstance(key, str) else "key",
            call_key_argument=call_key if isinstance(call_key, str) else None,
        )
    return checks


def _cap(fields: _Fields) -> int:
    value = fields.table.get("max_output_bytes", DEFAULT_OUTPUT_CAP_BYTES)
    if isinstance(value, bool) or not isinstance(value, int):
        raise fields.fault("max_output_bytes", "must be an integer")
    if not 1 <= value <= MAX_OUTPUT_CAP_BYTES:
        raise fields.fault("max_output_bytes", f"must be between 1 and {MAX_OUTPUT_CAP_BYTES}")
    return value


def _server(source: str, name: str, table: object) -> Server:
    fields = _Fields(source, f"servers.{name}", table, _SERVER_KEYS)
    stdio, http = "command" in fields.table, "url" in fields.table
    if stdio == http:
        raise fields.fault(None, "must have exactly one of command and url")
    tools = _tools(fields)
    common = {
        "name": name,
        "connect_timeout_seconds": fields.seconds(
            "connect_timeout_seconds", DEFAULT_CONNECT_TIMEOUT_S
        ),
        "initialize_timeout_seconds": fields.seconds(
            "initialize_timeout_seconds", DEFAULT_INITIALIZE_TIMEOUT_S
        ),
        "call_timeout_seconds": fields.seconds("call_timeout_seconds", DEFAULT_CALL_TIMEOUT_S),
        "max_output_bytes": _cap(fields),
        "tools": tools,
        "checks": _checks(fields, tools),
    }
    if http:
        for key in ("cwd", "env", "env_secrets"):
            if key in fields.table:
                raise fields.fault(key, "is for a stdio command only")
        headers, header_secrets = _headers(fields)
        return Server(url=_url(fields), headers=headers, header_secrets=header_secrets, **common)  # type: ignore[arg-type]  # the shared fields, typed above
    for key in ("headers", "header_secrets"):
        if key in fields.table:
            raise fields.fault(key, "is for a url only")
    cwd = fields.table.get("cwd", "/")
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        raise fields.fault("cwd", "must be an absolute path to a directory")
    env, env_secrets = _env(fields)
    return Server(command=_command(fields), cwd=cwd, env=env, env_secrets=env_secrets, **common)  # type: ignore[arg-type]  # the shared fields, typed above


def parse(data: Mapping[str, object], *, source: str) -> ServerSet:
    """The servers of an already-decoded TOML document; `source` names it in errors."""
    for key in data:
        if key != "servers":
            shown = key if _VARIABLE.fullmatch(key) else "?"
            raise McpConfigInvalid(f"{source}: {shown}: unknown table (only [servers.NAME])")
    body = data.get("servers", {})
    if not isinstance(body, dict):
        raise McpConfigInvalid(f"{source}: servers: must be [servers.NAME] tables")
    built = {}
    for name, table in body.items():
        if not plans.is_identifier(name):
            raise McpConfigInvalid(f"{source}: servers.?: a server name must match {_NAME_RULE}")
        built[name] = _server(source, name, table)
    return ServerSet(built, source)


def load(path: Path) -> ServerSet:
    """The servers of the TOML file at `path`; one `ConfigurationError` line on any fault."""
    try:
        data = bounded_files.read_at_most(path, bounded_files.CONFIG_MAX_BYTES)
        document = tomllib.loads(data.decode("utf-8"))
    except bounded_files.TooLarge as exc:
        raise McpConfigInvalid(f"{path}: cannot be read ({exc})") from None
    except OSError as exc:
        raise McpConfigInvalid(
            f"{path}: cannot be read ({exc.strerror or type(exc).__name__})"
        ) from None
    except ValueError as exc:  # TOMLDecodeError or not UTF-8: only the position, no text
        found = _LOCATION.search(str(exc))
        raise McpConfigInvalid(
            f"{path}: not valid TOML{' ' + found.group(0) if found else ''}"
        ) from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise McpConfigInvalid(f"{path}: not valid TOML (nested too deeply)") from None
    return parse(document, source=str(path))
