"""An installed action's plan parses only with its model handed in, and only if it survives
canonical JSON unchanged (its digest must bind exactly what was approved)."""

from __future__ import annotations

from typing import Annotated, ClassVar

import pydantic
import pytest

from qinglong_dispatcher.actions import builtin, registry
from qinglong_dispatcher.domain import digests, errors, plans
from tests.support.installed_actions import EchoPlan

MODELS: plans.PlanModels = {"test.echo": EchoPlan}
BASE = {"schemaVersion": 1, "actionRef": "act-1", "projectId": "p1"}
GOOD = {**BASE, "answer": "succeeded"}


def test_an_installed_type_is_unknown_without_its_model() -> None:
    with pytest.raises(errors.UnknownActionType):
        plans.parse_plan("test.echo", GOOD)
    plan = plans.parse_plan("test.echo", GOOD, models=MODELS)
    assert isinstance(plan, EchoPlan)
    assert plan.action_type == "test.echo"


def test_an_installed_plan_is_exact_shape_like_the_built_ins() -> None:
    for bad, field in [
        ({**GOOD, "extra": 1}, "extra"),
        ({**GOOD, "schemaVersion": True}, "schemaVersion"),
        ({**GOOD, "projectId": "../x"}, "projectId"),
        ({**GOOD, "answer": "maybe"}, "answer"),
    ]:
        with pytest.raises(errors.PlanInvalid) as info:
            plans.parse_plan("test.echo", bad, models=MODELS)
        assert str(info.value).startswith(f"plan invalid: {field}: ")


def test_canonical_bytes_round_trip_and_bind_the_type() -> None:
    plan = plans.parse_plan("test.echo", GOOD, models=MODELS)
    data = plans.plan_canonical(plan)
    digest = plans.plan_action_digest(plan, digests.PLAIN)
    resolved, again = plans.resolve_plan(
        "test.echo", data, approved_digest=digest, models=MODELS, plan_digests=digests.PLAIN
    )
    assert (resolved, again) == (plan, digest)
    other = plans.parse_plan("test.manual", GOOD, models={"test.manual": _Manual})
    assert plans.plan_canonical(other) == data
    assert plans.plan_action_digest(other, digests.PLAIN) != digest


class _Manual(EchoPlan):
    ACTION_TYPE: ClassVar[str] = "test.manual"


class _Lossy(plans.PlanModel):
    """Drops a member when dumped: its canonical JSON would not bind what was approved."""

    ACTION_TYPE: ClassVar[str] = "test.lossy"

    secret: str = pydantic.Field(default="x", exclude=True)


class _Raising(plans.PlanModel):
    ACTION_TYPE: ClassVar[str] = "test.raising"

    n: Annotated[int, pydantic.Field(strict=True)]

    @pydantic.field_validator("n")
    @classmethod
    def _boom(cls, value: int) -> int:
        raise TypeError("installed code with a bug")


def test_a_model_that_does_not_survive_canonical_json_is_refused() -> None:
    with pytest.raises(errors.PlanInvalid) as info:
        plans.parse_plan("test.lossy", {**BASE, "secret": "y"}, models={"test.lossy": _Lossy})
    assert info.value.code == "plan_not_canonical"


def test_an_installed_model_that_raises_is_one_line_plan_invalid() -> None:
    with pytest.raises(errors.PlanInvalid) as info:
        plans.parse_plan("test.raising", {**BASE, "n": 1}, models={"test.raising": _Raising})
    assert info.value.code == "plan_model_failed"
    assert "bug" not in str(info.value)


def test_built_in_types_parse_with_their_own_models() -> None:
    # The domain parses with the models it is given: the built-in ones name each built-in
    # type's own, and no entry point may declare a built-in type (test_action_registry.py).
    assert set(builtin.PLAN_MODELS) == registry.BUILT_IN
    with pytest.raises(errors.PlanInvalid):
        plans.parse_plan("run.create", GOOD, models=builtin.PLAN_MODELS)
