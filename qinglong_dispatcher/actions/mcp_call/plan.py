"""The plan of `mcp.call`: which configured server, which tool, with which arguments.

The plan names a server of the operator's configuration (`servers`) and one of its tools; how
to reach the server (a command or a URL), its credentials and its limits are never in a plan,
so an approval can only ever call what the configuration already allows. `arguments` is the
exact JSON object sent as the call's arguments, bound by the approval's digest; it may carry
customer data, so it is sensitive. `inputSchemaDigest`, when given, binds the tool's input
schema as the approver saw it: a tool whose schema has changed since is refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Final

import pydantic
from pydantic import Field, StringConstraints

from qinglong_dispatcher.domain import plans

ACTION_TYPE: Final = "mcp.call"
MAX_DEPTH: Final = 32
"""How deeply the arguments may nest (the plan's 64 KiB canonical cap bounds their size)."""

TOOL_NAME_RULE: Final = "[A-Za-z0-9_.:/-]{1,128}"
"""MCP tool names: letters, digits, `_`, `-`, `.`, and the `:` and `/` some servers use."""
_TOOL_NAME = re.compile(TOOL_NAME_RULE)

ToolName = Annotated[str, StringConstraints(strict=True, pattern=f"^{TOOL_NAME_RULE}$")]
Digest = Annotated[str, StringConstraints(strict=True, pattern="^[0-9a-f]{64}$")]


def _json_depth(value: object, depth: int = 0) -> int:
    if isinstance(value, dict):
        return max((_json_depth(v, depth + 1) for v in value.values()), default=depth + 1)
    if isinstance(value, list):
        return max((_json_depth(v, depth + 1) for v in value), default=depth + 1)
    return depth


def is_tool_name(value: str) -> bool:
    """Whether `value` can name a tool at all (configuration patterns are matched after)."""
    return _TOOL_NAME.fullmatch(value) is not None


class McpCallPlan(plans.PlanModel):
    """Plan v1: `server` (a configured server's name), `tool` and its `arguments` object,
    optionally `inputSchemaDigest` (`servers.schema_digest` of the tool's input schema).

    `schemaVersion`, `actionRef` and `projectId` come with the base; the shape is exact (strict,
    frozen, unknown fields refused) and survives canonical JSON unchanged (no floats: canonical
    JSON has none, so a tool taking a fractional number takes it as a string).
    """

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("arguments",)
    """The arguments may carry customer data or secrets: previews show size and digest only."""
    TARGET_MEMBER: ClassVar[str | None] = "server"
    """A server is what a call changes, as a receiver is: one call at a time per server, and
    none after a call whose answer was lost until its check (or an operator) settles it."""

    server: plans.Identifier
    tool: ToolName
    arguments: dict[str, Any] = Field()
    input_schema_digest: Digest | None = Field(None, alias="inputSchemaDigest")

    @pydantic.field_validator("arguments")
    @classmethod
    def _bounded_arguments(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Messages name the rule, never a value: the arguments are sensitive.
        if _json_depth(value) > MAX_DEPTH:
            raise ValueError(f"must nest at most {MAX_DEPTH} levels")
        return value
