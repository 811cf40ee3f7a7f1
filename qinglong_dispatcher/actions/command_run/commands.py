"""The `command.run` configuration: which commands exist and how each may run, from one TOML file.

Every command is a table `[commands.NAME]`; a plan names it and supplies only the arguments
its `args` patterns admit. Everything else — the executable, the fixed argument prefix, the
folder, the environment, the secrets (by reference), the limits, the user and the evidence
check — is the operator's, here. Every fault is one `ConfigurationError` line naming the file,
the command and the field; never a value, since a misplaced secret must not reach a log.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pwd
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.domain import errors, plans

DEFAULT_TIMEOUT_S: Final = 10.0
"""Below the default execute timeout (half the default 30 s lease)."""
DEFAULT_CHECK_TIMEOUT_S: Final = 10.0
MAX_TIMEOUT_S: Final = 86_400.0
DEFAULT_OUTPUT_CAP_BYTES: Final = 64 * 1024
MAX_OUTPUT_CAP_BYTES: Final = 16 * 1024 * 1024
MAX_ARGS: Final = 32
"""As many argument positions as a plan may fill (`plan.MAX_ARGS` is the same bound)."""

_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_PLACEHOLDER = re.compile(r"\{([0-9]{1,2})\}")
_NAME_RULE: Final = "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
_LOCATION = re.compile(r"\(at line [0-9]+, column [0-9]+\)")
_COMMAND_KEYS: Final = frozenset(
    {
        "executable",
        "argv",
        "args",
        "cwd",
        "env",
        "env_secrets",
        "timeout_seconds",
        "output_cap_bytes",
        "user",
        "fails_cleanly",
        "check",
    }
)
_ARG_KEYS: Final = frozenset({"pattern", "sensitive"})
_CHECK_KEYS: Final = frozenset({"argv", "expect", "timeout_seconds"})


class CommandConfigInvalid(errors.ConfigurationError):
    """The `command.run` configuration is not valid."""

    code = "command_config_invalid"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ArgRule:
    """One plan argument position: the pattern its value must fullmatch."""

    pattern: re.Pattern[str]
    sensitive: bool = False
    """A sensitive value never reaches a receipt, a log or an error (it is redacted)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunAs:
    """The user a root daemon switches to: its uid, primary group and supplementary groups."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """A read-only probe that proves a run's effect: `argv` (with `{N}` standing for plan
    argument N) must print something `expect` finds."""

    argv: tuple[str, ...]
    expect: re.Pattern[str]
    timeout_seconds: float = DEFAULT_CHECK_TIMEOUT_S

    def argv_for(self, args: Sequence[str]) -> tuple[str, ...]:
        """The check's argv with every `{N}` element replaced by plan argument N."""
        return tuple(
            args[int(m.group(1))] if (m := _PLACEHOLDER.fullmatch(part)) else part
            for part in self.argv
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Command:
    """One configured command."""

    name: str
    executable: str
    argv: tuple[str, ...] = ()
    args: tuple[ArgRule, ...] = ()
    cwd: str = "/"
    env: tuple[str, ...] = ()
    """Names of daemon variables copied into the command's environment when set."""
    env_secrets: tuple[tuple[str, secrets.SecretRef], ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_S
    output_cap_bytes: int = DEFAULT_OUTPUT_CAP_BYTES
    run_as: RunAs | None = None
    fails_cleanly: bool = False
    """Whether a non-zero exit proves nothing changed (else it is uncertain)."""
    check: Check | None = None

    def refusal(self, args: Sequence[str]) -> str | None:
        """Why these plan arguments may not run (a low-sensitivity code), or None."""
        if len(args) != len(self.args):
            return "command_args_invalid"
        for value, rule in zip(args, self.args, strict=True):
            if rule.pattern.fullmatch(value) is None:
                return "command_args_invalid"
        return None

    def argv_for(self, args: Sequence[str]) -> tuple[str, ...]:
        """What runs: the executable, the fixed prefix, then the plan's arguments."""
        return (self.executable, *self.argv, *args)

    def sensitive_values(self, args: Sequence[str]) -> tuple[str, ...]:
        """The plan argument values marked sensitive."""
        return tuple(v for v, rule in zip(args, self.args, strict=False) if rule.sensitive)


@dataclasses.dataclass(frozen=True, slots=True)
class CommandSet:
    """Every configured command by name."""

    commands: Mapping[str, Command]
    source: str = "commands"
    """The file it was read from, named in refusals."""

    def get(self, name: str) -> Command | None:
        """The command called `name`, or None."""
        return self.commands.get(name)

    def require_within(self, execute_timeout_s: float) -> None:
        """Refuse a command whose timeout is not below the execute timeout: the dispatcher
        would cut the execute off mid-run, which can only end indeterminate (`blocked`)
        instead of `uncertain`, and recovery would never ask the check."""
        for name, command in self.commands.items():
            if command.timeout_seconds >= execute_timeout_s:
                raise CommandConfigInvalid(
                    f"{self.source}: commands.{name}.timeout_seconds must be below the "
                    f"execute timeout ({execute_timeout_s:g} s)"
                )


class _Fields:
    """Reads one table's fields; every fault names `where.field`."""

    def __init__(self, source: str, where: str, table: object, allowed: frozenset[str]) -> None:
        self.source, self.where = source, where
        if not isinstance(table, dict):
            raise self.fault(None, "must be a table")
        for key in table:
            if key not in allowed:
                shown = key if _VARIABLE.fullmatch(key) else "?"
                raise self.fault(shown, "unknown field")
        self.table: dict[str, object] = table

    def fault(self, field: str | None, reason: str) -> CommandConfigInvalid:
        where = f"{self.where}.{field}" if field else self.where
        return CommandConfigInvalid(f"{self.source}: {where}: {reason}")

    def boolean(self, field: str, default: bool) -> bool:
        value = self.table.get(field, default)
        if not isinstance(value, bool):
            raise self.fault(field, "must be true or false")
        return value

    def text(self, field: str) -> str | None:
        value = self.table.get(field)
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise self.fault(field, "must be a string without NUL")
        return value

    def texts(self, field: str) -> tuple[str, ...]:
        value = self.table.get(field, [])
        if not isinstance(value, list):
            raise self.fault(field, "must be a list of strings")
        for item in value:
            if not isinstance(item, str) or "\x00" in item:
                raise self.fault(field, "must be a list of strings without NUL")
        return tuple(value)

    def seconds(self, field: str, default: float) -> float:
        value = self.table.get(field, default)
        # TOML integers and floats alike; a bool is an int to Python, not to us.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fault(field, "must be a number of seconds")
        if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
            raise self.fault(field, f"must be > 0 and <= {MAX_TIMEOUT_S:g}")
        return float(value)

    def regex(self, field: str) -> re.Pattern[str]:
        value = self.text(field)
        if value is None:
            raise self.fault(field, "is required")
        try:
            return re.compile(value)
        except re.error:
            raise self.fault(field, "is not a valid regular expression") from None


def _executable(fields: _Fields, field: str, value: str | None) -> str:
    if value is None:
        raise fields.fault(field, "is required")
    if not os.path.isabs(value):
        raise fields.fault(field, "must be an absolute path")
    if not os.path.isfile(value) or not os.access(value, os.X_OK):
        raise fields.fault(field, "is not an executable file")
    return value


def _args(fields: _Fields) -> tuple[ArgRule, ...]:
    value = fields.table.get("args", [])
    if not isinstance(value, list) or len(value) > MAX_ARGS:
        raise fields.fault("args", f"must be a list of at most {MAX_ARGS} tables")
    rules = []
    for index, item in enumerate(value):
        arg = _Fields(fields.source, f"{fields.where}.args.{index}", item, _ARG_KEYS)
        rules.append(
            ArgRule(pattern=arg.regex("pattern"), sensitive=arg.boolean("sensitive", False))
        )
    return tuple(rules)


def _env(fields: _Fields) -> tuple[str, ...]:
    names = fields.texts("env")
    for name in names:
        if not _VARIABLE.fullmatch(name):
            raise fields.fault("env", "must list variable names")
    if len(set(names)) != len(names):
        raise fields.fault("env", "names a variable twice")
    return names


def _env_secrets(
    fields: _Fields, allowed: tuple[str, ...]
) -> tuple[tuple[str, secrets.SecretRef], ...]:
    value = fields.table.get("env_secrets", {})
    if not isinstance(value, dict):
        raise fields.fault("env_secrets", "must be a table of VARIABLE = reference")
    refs = []
    for name, ref in value.items():
        if not _VARIABLE.fullmatch(name):
            raise fields.fault("env_secrets.?", "must be a variable name")
        if name in allowed:
            raise fields.fault(f"env_secrets.{name}", "is also in env")
        try:
            refs.append((name, secrets.SecretRef.parse(ref)))
        except ValueError as exc:  # its message names no value
            raise fields.fault(f"env_secrets.{name}", str(exc)) from None
    return tuple(refs)


def _cap(fields: _Fields) -> int:
    value = fields.table.get("output_cap_bytes", DEFAULT_OUTPUT_CAP_BYTES)
    if isinstance(value, bool) or not isinstance(value, int):
        raise fields.fault("output_cap_bytes", "must be an integer")
    if not 1 <= value <= MAX_OUTPUT_CAP_BYTES:
        raise fields.fault("output_cap_bytes", f"must be between 1 and {MAX_OUTPUT_CAP_BYTES}")
    return value


def _run_as(fields: _Fields, euid: int) -> RunAs | None:
    name = fields.text("user")
    if name is None:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise fields.fault("user", "names no user of this system") from None
    if euid != 0:
        # Only root can switch; anyone else may only name itself (which switches nothing).
        if entry.pw_uid != euid:
            raise fields.fault("user", "differs from the daemon's user, which is not root")
        return None
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return RunAs(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid, groups=groups)


def _check(fields: _Fields, command: Command) -> Check | None:
    table = fields.table.get("check")
    if table is None:
        return None
    check = _Fields(fields.source, f"{fields.where}.check", table, _CHECK_KEYS)
    argv = check.texts("argv")
    if not argv:
        raise check.fault("argv", "must name the check's executable first")
    _executable(check, "argv", argv[0])
    for part in argv:
        if (m := _PLACEHOLDER.fullmatch(part)) and int(m.group(1)) >= len(command.args):
            raise check.fault("argv", "names a plan argument the command does not take")
    placeholders = tuple(f"{{{n}}}" for n in range(len(command.args)))
    if os.path.realpath(argv[0]) == os.path.realpath(command.executable) and argv[1:] == (
        *command.argv,
        *placeholders,
    ):
        raise check.fault("argv", "is the command itself; a check must only look")
    return Check(
        argv=argv,
        expect=check.regex("expect"),
        timeout_seconds=check.seconds("timeout_seconds", DEFAULT_CHECK_TIMEOUT_S),
    )


def _command(source: str, name: str, table: object, euid: int) -> Command:
    fields = _Fields(source, f"commands.{name}", table, _COMMAND_KEYS)
    cwd = fields.text("cwd")
    cwd = "/" if cwd is None else cwd
    if not os.path.isabs(cwd) or not os.path.isdir(cwd):
        raise fields.fault("cwd", "must be an absolute path to a directory")
    env = _env(fields)
    command = Command(
        name=name,
        executable=_executable(fields, "executable", fields.text("executable")),
        argv=fields.texts("argv"),
        args=_args(fields),
        cwd=cwd,
        env=env,
        env_secrets=_env_secrets(fields, env),
        timeout_seconds=fields.seconds("timeout_seconds", DEFAULT_TIMEOUT_S),
        output_cap_bytes=_cap(fields),
        run_as=_run_as(fields, euid),
        fails_cleanly=fields.boolean("fails_cleanly", False),
    )
    return dataclasses.replace(command, check=_check(fields, command))


def parse(data: Mapping[str, object], *, source: str, euid: int | None = None) -> CommandSet:
    """The commands of an already-decoded TOML document; `source` names it in errors.

    `euid` is the user the daemon runs as (default: this process's effective uid); only root
    may name another `user`.
    """
    for key in data:
        if key != "commands":
            shown = key if _VARIABLE.fullmatch(key) else "?"
            raise CommandConfigInvalid(f"{source}: {shown}: unknown table (only [commands.NAME])")
    body = data.get("commands", {})
    if not isinstance(body, dict):
        raise CommandConfigInvalid(f"{source}: commands: must be [commands.NAME] tables")
    running_as = os.geteuid() if euid is None else euid
    built = {}
    for name, table in body.items():
        if not plans.is_identifier(name):
            raise CommandConfigInvalid(
                f"{source}: commands.?: a command name must match {_NAME_RULE}"
            )
        built[name] = _command(source, name, table, running_as)
    return CommandSet(built, source)


def load(path: Path) -> CommandSet:
    """The commands of the TOML file at `path`; one `ConfigurationError` line on any fault."""
    try:
        data = bounded_files.read_at_most(path, bounded_files.CONFIG_MAX_BYTES)
        document = tomllib.loads(data.decode("utf-8"))
    except bounded_files.TooLarge as exc:
        raise CommandConfigInvalid(f"{path}: cannot be read ({exc})") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CommandConfigInvalid(f"{path}: cannot be read ({reason})") from None
    except ValueError as exc:  # TOMLDecodeError or not UTF-8: only the position, no text
        found = _LOCATION.search(str(exc))
        where = f" {found.group(0)}" if found else ""
        raise CommandConfigInvalid(f"{path}: not valid TOML{where}") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise CommandConfigInvalid(f"{path}: not valid TOML (nested too deeply)") from None
    return parse(document, source=str(path))
