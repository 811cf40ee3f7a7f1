"""The plan of `run.create`: which task revision to queue as a Run, and how — all it binds."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

import pydantic
from pydantic import Field, StringConstraints

from qinglong_dispatcher.domain import canonical, plans

ACTION_TYPE: Final = "run.create"

Revision = Annotated[int, Field(strict=True, ge=0, le=canonical.MAX_SAFE_INTEGER)]
Priority = Annotated[int, Field(strict=True, ge=-1000, le=1000)]
TaskName = Annotated[str, StringConstraints(strict=True, min_length=1, max_length=200)]


class RunCreatePlan(plans.BuiltInPlan):
    """Plan v1 of `run.create` (docs/actions.md): which task revision to queue as a Run, and how."""

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    # None: every member is an identifier, a number or the task's name, which the Run it
    # creates keeps in clear (`runs.task_name`) for every reader of the database anyway.
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ()

    task_id: plans.Identifier = Field(alias="taskId")
    task_revision: Revision = Field(alias="taskRevision")
    executor_type: plans.Identifier = Field(alias="executorType")
    priority: Priority = Field(alias="priority")
    task_name: TaskName | None = Field(default=None, alias="taskName")
    task_snapshot_ref: plans.Identifier | None = Field(default=None, alias="taskSnapshotRef")
    input_ref: plans.Identifier | None = Field(default=None, alias="inputRef")

    @pydantic.field_validator("task_name")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        # isprintable() refuses control, format, surrogate, unassigned and separator
        # characters other than the ASCII space.
        if value is not None and not value.isprintable():
            raise ValueError("must be printable text without control characters")
        return value
