"""The `command.run` configuration: a TOML file of `[commands.NAME]` tables, loaded whole or
refused in one line that names the file, the command and the field — never a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher.actions.command_run import commands
from qinglong_dispatcher.domain import errors

SOURCE = "commands.toml"


def _script(tmp_path: Path, name: str = "tool", body: str = "exit 0\n") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _parse(table: dict[str, Any], *, euid: int | None = None) -> commands.CommandSet:
    return commands.parse({"commands": {"tool": table}}, source=SOURCE, euid=euid)


def _refusal(table: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(errors.ConfigurationError) as info:
        _parse(table, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{SOURCE}: ")
    return message


def test_a_file_loads_every_field_and_the_defaults(tmp_path: Path) -> None:
    tool = _script(tmp_path)
    (tmp_path / "commands.toml").write_text(
        f"""
[commands.deploy]
executable = "{tool}"
argv = ["--site"]
args = [{{ pattern = "[a-z]+" }}, {{ pattern = ".*", sensitive = true }}]
cwd = "{tmp_path}"
env = ["HTTPS_PROXY"]
env_secrets = {{ TOKEN = "credential:deploy-token" }}
timeout_seconds = 2.5
output_cap_bytes = 1024
fails_cleanly = true
check = {{ argv = ["/bin/grep", "-x", "{{0}}", "/dev/null"], expect = "^ok$", timeout_seconds = 3 }}

[commands."plain.one"]
executable = "{tool}"
"""
    )
    loaded = commands.load(tmp_path / "commands.toml")
    deploy = loaded.get("deploy")
    assert deploy is not None
    assert deploy.argv_for(["site", "hidden"]) == (str(tool), "--site", "site", "hidden")
    assert deploy.sensitive_values(["site", "hidden"]) == ("hidden",)
    assert (deploy.cwd, deploy.env, deploy.timeout_seconds) == (
        str(tmp_path),
        ("HTTPS_PROXY",),
        2.5,
    )
    assert [(name, str(ref)) for name, ref in deploy.env_secrets] == [
        ("TOKEN", "credential:deploy-token")
    ]
    assert (deploy.output_cap_bytes, deploy.fails_cleanly) == (1024, True)
    assert deploy.check is not None
    assert deploy.check.argv_for(["site", "hidden"]) == ("/bin/grep", "-x", "site", "/dev/null")
    assert deploy.check.timeout_seconds == 3.0
    plain = loaded.get("plain.one")
    assert plain is not None
    assert (plain.argv, plain.args, plain.cwd, plain.env, plain.env_secrets) == (
        (),
        (),
        "/",
        (),
        (),
    )
    assert (plain.timeout_seconds, plain.output_cap_bytes) == (10.0, 65536)
    assert (plain.run_as, plain.fails_cleanly, plain.check) == (None, False, None)
    assert loaded.get("absent") is None


def test_arguments_must_fullmatch_their_patterns_and_fill_every_position(tmp_path: Path) -> None:
    command = _parse(
        {
            "executable": str(_script(tmp_path)),
            "args": [{"pattern": "[a-z]+"}, {"pattern": "[0-9]"}],
        }
    ).get("tool")
    assert command is not None
    assert command.refusal(["abc", "7"]) is None
    assert command.refusal(["abc", "77"]) == "command_args_invalid"  # search would match
    assert command.refusal(["abc\n", "7"]) == "command_args_invalid"  # `$` would match
    assert command.refusal(["abc"]) == "command_args_invalid"
    assert command.refusal(["abc", "7", "x"]) == "command_args_invalid"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"shell": True}, "commands.tool.shell: unknown field"),
        ({"argv": "--site"}, "commands.tool.argv: must be a list of strings"),
        ({"argv": ["a\x00b"]}, "commands.tool.argv: must be a list of strings without NUL"),
        ({"args": [{"pattern": "("}]}, "commands.tool.args.0.pattern: is not a valid regular"),
        ({"args": [{"pattern": "a", "secret": 1}]}, "commands.tool.args.0.secret: unknown field"),
        ({"args": [{"pattern": "a", "sensitive": "yes"}]}, "commands.tool.args.0.sensitive:"),
        ({"args": [{}]}, "commands.tool.args.0.pattern: is required"),
        ({"args": [{"pattern": "a"}] * 33}, "commands.tool.args: must be a list of at most 32"),
        ({"cwd": "relative"}, "commands.tool.cwd: must be an absolute path to a directory"),
        ({"cwd": "/no/such/folder"}, "commands.tool.cwd: must be an absolute path"),
        ({"env": ["NOT-A-NAME"]}, "commands.tool.env: must list variable names"),
        ({"env": ["A", "A"]}, "commands.tool.env: names a variable twice"),
        ({"env_secrets": {"A": "hunter2"}}, "commands.tool.env_secrets.A: a secret reference"),
        ({"env_secrets": ["credential:x"]}, "commands.tool.env_secrets: must be a table"),
        ({"env": ["A"], "env_secrets": {"A": "env:B"}}, "commands.tool.env_secrets.A: is also"),
        ({"timeout_seconds": 0}, "commands.tool.timeout_seconds: must be > 0"),
        ({"timeout_seconds": -1.5}, "commands.tool.timeout_seconds: must be > 0"),
        ({"timeout_seconds": True}, "commands.tool.timeout_seconds: must be a number"),
        ({"timeout_seconds": float("nan")}, "commands.tool.timeout_seconds: must be > 0"),
        ({"output_cap_bytes": 16 * 1024 * 1024 + 1}, "commands.tool.output_cap_bytes: must be"),
        ({"output_cap_bytes": 0}, "commands.tool.output_cap_bytes: must be between"),
        ({"output_cap_bytes": 1.5}, "commands.tool.output_cap_bytes: must be an integer"),
        ({"fails_cleanly": 1}, "commands.tool.fails_cleanly: must be true or false"),
        ({"user": "no-such-user-here"}, "commands.tool.user: names no user of this system"),
        ({"check": {"argv": []}}, "commands.tool.check.argv: must name the check's executable"),
        ({"check": {"argv": ["grep"]}}, "commands.tool.check.argv: must be an absolute path"),
        ({"check": {"argv": ["/bin/true"]}}, "commands.tool.check.expect: is required"),
        ({"check": {"argv": ["/bin/true", "{0}"], "expect": "x"}}, "check.argv: names a plan"),
        ({"check": {"argv": ["/bin/true"], "expect": "x", "run": 1}}, "check.run: unknown field"),
        ({"check": {"argv": ["/bin/true"], "expect": "["}}, "check.expect: is not a valid"),
    ],
)
def test_a_bad_field_is_refused_in_one_line_naming_it(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    message = _refusal({"executable": str(_script(tmp_path)), **change})
    assert field in message
    assert "hunter2" not in message


def test_the_executable_must_be_an_absolute_executable_file(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    for executable, reason in [
        (None, "is required"),
        ("tool", "must be an absolute path"),
        (str(tmp_path / "absent"), "is not an executable file"),
        (str(plain), "is not an executable file"),
        (str(tmp_path), "is not an executable file"),
    ]:
        table = {} if executable is None else {"executable": executable}
        assert f"commands.tool.executable: {reason}" in _refusal(table)


def test_a_check_may_not_be_the_command_itself(tmp_path: Path) -> None:
    tool = str(_script(tmp_path))
    same = {"executable": tool, "argv": ["apply"], "args": [{"pattern": ".*"}]}
    message = _refusal({**same, "check": {"argv": [tool, "apply", "{0}"], "expect": "x"}})
    assert "commands.tool.check.argv: is the command itself" in message
    # The same executable asked something else is a check.
    status = {"argv": [tool, "status", "{0}"], "expect": "x"}
    assert _parse({**same, "check": status}).get("tool") is not None


def test_only_root_switches_users_and_anyone_else_may_name_only_itself(tmp_path: Path) -> None:
    tool = str(_script(tmp_path))
    message = _refusal({"executable": tool, "user": "nobody"}, euid=12345)
    assert "commands.tool.user: differs from the daemon's user, which is not root" in message
    itself = _parse({"executable": tool, "user": "nobody"}, euid=65534).get("tool")
    assert itself is not None
    assert itself.run_as is None  # already that user: nothing to switch
    as_root = _parse({"executable": tool, "user": "nobody"}, euid=0).get("tool")
    assert as_root is not None
    assert as_root.run_as is not None
    assert (as_root.run_as.uid, as_root.run_as.gid) == (65534, 65534)
    assert 0 not in as_root.run_as.groups


def test_names_and_tables_outside_commands_are_refused() -> None:
    documents: list[tuple[dict[str, Any], str]] = [
        ({"command": {}}, "commands.toml: command: unknown table"),
        ({"commands": []}, "commands.toml: commands: must be [commands.NAME] tables"),
        ({"commands": {"../x": {}}}, "commands.toml: commands.?: a command name must match"),
        ({"commands": {"tool": "x"}}, "commands.toml: commands.tool: must be a table"),
    ]
    for document, reason in documents:
        with pytest.raises(errors.ConfigurationError) as info:
            commands.parse(document, source=SOURCE)
        assert str(info.value).startswith(reason)
    assert commands.parse({}, source=SOURCE).commands == {}


def test_a_file_that_is_not_toml_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "commands.toml"
    path.write_text('[commands.tool]\nexecutable = "/bin/true"\ntoken = hunter2\n')
    with pytest.raises(errors.ConfigurationError) as info:
        commands.load(path)
    assert str(info.value) == f"{path}: not valid TOML (at line 3, column 9)"
    with pytest.raises(errors.ConfigurationError) as info:
        commands.load(tmp_path / "absent.toml")
    assert (
        str(info.value) == f"{tmp_path / 'absent.toml'}: cannot be read (No such file or directory)"
    )
    assert info.value.code == "command_config_invalid"
