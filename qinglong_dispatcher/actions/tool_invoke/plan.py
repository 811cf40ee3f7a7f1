"""The plan of `tool.invoke`: which Tool StepRun of which Run runs which reviewed tool."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

import pydantic
from pydantic import Field, StringConstraints

from qinglong_dispatcher.domain import canonical, errors, plans
from qinglong_dispatcher.domain.tools import registry as tool_registry

ACTION_TYPE: Final = "tool.invoke"


class ToolInvocationPlan(plans.BuiltInPlan):
    """Plan v1 of `tool.invoke`: which Tool StepRun of which Run runs which tool.

    The only input is bounded inline content for `builtin.file.write`; there is no path, URL
    or secret field, and `extra="forbid"` refuses any such member.
    """

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("content",)

    run_id: plans.Identifier = Field(alias="runId")
    step_run_id: plans.Identifier = Field(alias="stepRunId")
    tool_id: Literal["builtin.file.write"] = Field(alias="toolId")
    tool_version: Annotated[int, Field(strict=True, ge=1, le=1000)] = Field(alias="toolVersion")
    content: Annotated[str, StringConstraints(strict=True)] = Field(alias="content")

    @pydantic.field_validator("content")
    @classmethod
    def _bounded_text(cls, value: str) -> str:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError("must be valid Unicode text") from None
        if size > tool_registry.MAX_CONTENT_BYTES:
            raise ValueError(
                f"must be at most {tool_registry.MAX_CONTENT_BYTES} bytes of UTF-8 text"
            )
        return value

    @pydantic.model_validator(mode="after")
    def _known_tool_within_cap(self) -> ToolInvocationPlan:
        if tool_registry.lookup(self.tool_id, self.tool_version) is None:
            raise ValueError("toolId and toolVersion name no reviewed built-in tool")
        try:
            canonical.dumps(self.to_canonical_dict())
        except errors.CanonicalJsonError:
            raise ValueError(
                f"larger than {canonical.PLAN_MAX_BYTES} bytes as canonical JSON"
            ) from None
        return self
