"""The plan of `example.note.write`: what an approver reads and the digest binds."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import StringConstraints, field_validator

from qinglong_dispatcher.domain import plans

ACTION_TYPE = "example.note.write"


class NotePlan(plans.PlanModel):
    """Plan v1: the text of the note (schemaVersion, actionRef and projectId come with the base)."""

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    # A note's text may be anything a user typed: previews show its size and digest only.
    # (Left out, every member but schemaVersion, actionRef and projectId would be sensitive.)
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("text",)

    text: Annotated[str, StringConstraints(strict=True, min_length=1, max_length=1000)]

    @field_validator("text")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("must be printable text")
        return value
