"""A built-in action's own settings: declared in its package, read like the global ones (the
same `QINGLONG_*` names and config-file keys), refused at load, handed only to that action."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from pydantic import BaseModel

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.command_run.settings import CommandRunSettings
from qinglong_dispatcher.actions.http_request.settings import HttpRequestSettings
from qinglong_dispatcher.actions.mcp_call.settings import McpCallSettings
from qinglong_dispatcher.actions.settings import ActionSettings
from qinglong_dispatcher.config import settings, web_settings
from qinglong_dispatcher.domain import errors


def test_the_registered_actions_bring_their_own_settings() -> None:
    expected: set[type[ActionSettings]] = {
        CommandRunSettings,
        HttpRequestSettings,
        McpCallSettings,
    }
    assert set(builtin.SETTINGS) == expected
    assert {"commands_file", "receivers_file", "mcp_servers_file"} <= set(
        settings.Settings.model_fields
    )
    assert "commands_file" not in settings.Settings.__annotations__


def test_no_action_setting_shadows_a_global_one_or_another_actions() -> None:
    declared = collections.Counter(list(settings.Settings.__annotations__))
    parts: list[type[BaseModel]] = [*builtin.SETTINGS, web_settings.WebSettings]
    for model in parts:
        declared.update(list(model.model_fields))
    assert {name for name, count in declared.items() if count > 1} == set()
    assert set(declared) == set(settings.Settings.model_fields)


def test_each_action_gets_only_its_own_from_the_environment(tmp_path: Path) -> None:
    commands = tmp_path / "commands.toml"
    commands.write_text("", encoding="utf-8")
    loaded = settings.load_settings(environ={"QINGLONG_COMMANDS_FILE": str(commands)})
    own = builtin.own_settings(loaded)
    assert own[CommandRunSettings] == CommandRunSettings(commands_file=commands)
    assert own[HttpRequestSettings] == HttpRequestSettings()


def test_a_config_file_sets_an_actions_setting_under_its_own_key(tmp_path: Path) -> None:
    receivers = tmp_path / "receivers.toml"
    receivers.write_text("", encoding="utf-8")
    config = tmp_path / "qinglong.toml"
    config.write_text(f'receivers_file = "{receivers}"\n', encoding="utf-8")
    loaded = settings.load_settings(config_file=config, environ={})
    own = builtin.own_settings(loaded)
    assert own[HttpRequestSettings] == HttpRequestSettings(receivers_file=receivers)


@pytest.mark.parametrize("field", ["commands_file", "receivers_file"])
def test_a_missing_actions_file_is_refused_at_load_naming_its_variable(field: str) -> None:
    variable = settings.env_name(field)
    with pytest.raises(errors.ConfigurationError) as caught:
        settings.load_settings(environ={variable: "/nonexistent/actions.toml"})
    assert str(caught.value).startswith(f"{variable}: ")
    assert "not a readable regular file" in str(caught.value)
