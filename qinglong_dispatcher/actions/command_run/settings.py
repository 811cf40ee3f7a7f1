"""`command.run`'s own settings: the operator's commands file."""

from __future__ import annotations

from pydantic import Field

from qinglong_dispatcher.actions import settings


class CommandRunSettings(settings.ActionSettings):
    """Read like the global settings (`QINGLONG_COMMANDS_FILE`, `commands_file`)."""

    commands_file: settings.RegularFile | None = Field(
        None,
        description="command.run: the TOML file of commands a plan may name (none: the "
        "action has no handler)",
    )
