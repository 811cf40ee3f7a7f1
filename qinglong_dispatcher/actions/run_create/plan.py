"""The plan of `run.create`: which task revision to queue as a Run, and how — all it binds."""

from __future__ import annotations

from typing import ClassVar, Final

import pydantic
from pydantic import Field

from qinglong_dispatcher.domain import plans

ACTION_TYPE: Final = "run.create"


class RunCreatePlan(plans.BuiltInPlan):
    """Plan v1 of `run.create` (docs/actions.md): which task revision to queue as a Run, and how."""

    ACTION_TYPE: ClassVar[str] = ACTION_TYPE
    # None: every member is an identifier, a number or the task's name, which the Run it
    # creates keeps in clear (`runs.task_name`) for every reader of the database anyway.
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ()

    task_id: plans.Identifier = Field(alias="taskId")
    task_revision: plans.Revision = Field(alias="taskRevision")
    executor_type: plans.Identifier = Field(alias="executorType")
    priority: plans.Priority = Field(alias="priority")
    task_name: plans.TaskName | None = Field(default=None, alias="taskName")
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
