"""The `command.run` plan: exact shape, bounded arguments, stable through canonical JSON, and
errors that never show an argument (it may be a sensitive one)."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from qinglong_dispatcher.actions.command_run import plan
from qinglong_dispatcher.domain import digests, errors, plans

MODELS: plans.PlanModels = {plan.ACTION_TYPE: plan.CommandRunPlan}
GOOD: dict[str, Any] = {
    "schemaVersion": 1,
    "actionRef": "act-1",
    "projectId": "p1",
    "command": "deploy-site",
    "args": ["main", "$(touch x)", "", "ünïcode"],
}


def _parse(data: dict[str, Any]) -> plans.AnyPlan:
    return plans.parse_plan(plan.ACTION_TYPE, data, models=MODELS)


def test_a_plan_survives_canonical_json_and_its_digest_binds_the_type() -> None:
    parsed = _parse(GOOD)
    assert isinstance(parsed, plan.CommandRunPlan)
    assert (parsed.command, parsed.args) == ("deploy-site", GOOD["args"])
    data = plans.plan_canonical(parsed)
    digest = plans.plan_action_digest(parsed, digests.PLAIN)
    again, digest_again = plans.resolve_plan(
        plan.ACTION_TYPE, data, approved_digest=digest, models=MODELS, plan_digests=digests.PLAIN
    )
    assert (again, digest_again) == (parsed, digest)
    assert plan.CommandRunPlan.ACTION_TYPE == "command.run"
    assert plan.CommandRunPlan.SENSITIVE_FIELDS == ("args",)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"shell": "sh"}, "shell: unknown field"),
        ({"command": "../bin/sh"}, "command: must match"),
        ({"command": None}, "command: must be a string"),
        ({"args": "main"}, "args: invalid value"),
        ({"args": ("main",)}, "args: invalid value"),
        ({"args": [1]}, "args.?: must be a string"),
        ({"args": ["a"] * 33}, "args: must hold at most 32 arguments"),
        ({"args": ["se\x00cret"]}, "args: an argument must not contain NUL"),
        ({"args": ["é" * 2049]}, "args: an argument must be at most 4096 bytes of UTF-8"),
        ({"schemaVersion": 2}, "schemaVersion: must be 1"),
    ],
)
def test_an_inexact_plan_is_refused_naming_the_field_but_never_an_argument(
    change: dict[str, Any], reason: str
) -> None:
    with pytest.raises(errors.PlanInvalid) as info:
        _parse({**GOOD, **change})
    message = str(info.value)
    assert message.startswith(f"plan invalid: {reason}")
    assert "cret" not in message
    assert "é" not in message


def test_args_are_required_and_may_be_empty_or_at_the_bounds() -> None:
    missing = {k: v for k, v in GOOD.items() if k != "args"}
    with pytest.raises(errors.PlanInvalid, match="args: required field is missing"):
        _parse(missing)
    assert isinstance(_parse({**GOOD, "args": []}), plan.CommandRunPlan)
    at_bounds = _parse({**GOOD, "args": ["é" * 2048] + ["x"] * 31})
    assert isinstance(at_bounds, plan.CommandRunPlan)
    assert len(at_bounds.args) == 32
    # Every plan is also held to 64 KiB of canonical JSON, which 32 full arguments exceed.
    with pytest.raises(errors.PlanInvalid, match="canonical JSON is larger than 65536 bytes"):
        _parse({**GOOD, "args": ["é" * 2048] * 32})


def test_the_plan_is_frozen() -> None:
    parsed = _parse(GOOD)
    assert isinstance(parsed, plan.CommandRunPlan)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        parsed.command = "other"  # type: ignore[misc]
