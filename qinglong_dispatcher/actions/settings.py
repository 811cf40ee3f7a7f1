"""A built-in action's own settings: a model in its package, named by its `BuiltInSpec`.

Its fields are read like the global settings, in the same flat namespace (`commands_file` is
`QINGLONG_COMMANDS_FILE` and the `commands_file` key of a `--config` file), because the global
settings model takes in every registered action's model (`config.settings.Settings`) and
checks them at load, for every command alike. The composition root hands each action only
its own (`BuiltInContext.settings_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class ActionSettings(BaseModel):
    """The base of a built-in action's settings: frozen, every field with a default (unset,
    the action is not configured), no field a global setting or another action already has."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _regular_file(value: Path) -> Path:
    # Its contents are checked when the actions are built (run, tick): here, that it is
    # there at all, so that a mistyped path is refused by every command alike.
    if not value.is_file():
        raise ValueError(f"not a readable regular file: {value}")
    return value


RegularFile = Annotated[Path, AfterValidator(_regular_file)]
"""A file an action reads at start: refused at load unless it is a regular file."""
