"""The plan of `command.run`: which configured command, with which arguments — all it binds.

The plan names a command of the operator's configuration (`commands`) and fills its argument
positions; the executable, its fixed prefix, the environment, the secrets and the limits are
never in a plan, so an approval can only ever run what the configuration already allows.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

import pydantic
from pydantic import Field, StringConstraints

from qinglong_dispatcher.domain import plans

ACTION_TYPE: Final = "command.run"
MAX_ARGS: Final = 32
MAX_ARG_BYTES: Final = 4096

Argument = Annotated[str, StringConstraints(strict=True)]


class CommandRunPlan(plans.PlanModel):
    """Plan v1: `command` (a configured command's name) and its `args`, in position order.

    `schemaVersion`, `actionRef` and `projectId` come with the base; the shape is exact (strict,
    frozen, unknown fields refused) and survives canonical JSON unchanged: `args` is a list,
    never a tuple, and every member is dumped as it was parsed.
    """

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("args",)
    """Fields a preview must redact: an argument may be marked sensitive by the command."""
    TARGET_MEMBER: ClassVar[str | None] = "command"
    """A configured command is what it changes (a deploy script, a router's reload): one run of
    a command at a time, and none after one whose outcome is unknown until it is settled."""

    command: plans.Identifier
    args: list[Argument] = Field()

    @pydantic.field_validator("args")
    @classmethod
    def _bounded_arguments(cls, value: list[str]) -> list[str]:
        # Messages name the rule, never a value: an argument may be a sensitive one.
        if len(value) > MAX_ARGS:
            raise ValueError(f"must hold at most {MAX_ARGS} arguments")
        for argument in value:
            if "\x00" in argument:
                raise ValueError("an argument must not contain NUL")
            try:
                size = len(argument.encode("utf-8"))
            except UnicodeEncodeError:
                raise ValueError("an argument must be valid Unicode text") from None
            if size > MAX_ARG_BYTES:
                raise ValueError(f"an argument must be at most {MAX_ARG_BYTES} bytes of UTF-8")
        return value
