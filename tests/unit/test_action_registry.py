"""Installed actions are checked at startup: each bad declaration is one typed, one-line error.

The distributions are real dist-info folders read by `importlib.metadata`; the loading code
under test is the production one (`registry.load`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract, registry
from qinglong_dispatcher.domain import digests, errors, plans
from tests.support import installed_actions
from tests.support.clock import ManualClock
from tests.support.installed_actions import HERE, entry_points_in, write_distribution


def _load(tmp_path: Path, *dists: tuple[str, dict[str, str]]) -> registry.Installed:
    for name, entries in dists:
        write_distribution(tmp_path, name, entries)
    return registry.load(entry_points_in(tmp_path))


def _refused(tmp_path: Path, *dists: tuple[str, dict[str, str]]) -> errors.ActionRegistrationError:
    with pytest.raises(errors.ActionRegistrationError) as info:
        _load(tmp_path, *dists)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("action entry point ")
    return info.value


def test_a_valid_distribution_registers_its_actions(tmp_path: Path) -> None:
    found = _load(
        tmp_path,
        ("qa-echo", {"test.echo": f"{HERE}:ECHO", "test.manual": f"{HERE}:MANUAL"}),
    )
    assert found.action_types == ["test.echo", "test.manual"]
    assert found.plan_models["test.echo"] is installed_actions.EchoPlan
    assert "qa-echo" in found.sources["test.echo"]


def test_nothing_installed_is_no_action(tmp_path: Path) -> None:
    assert _load(tmp_path).action_types == []


def test_the_same_type_from_two_distributions_is_refused(tmp_path: Path) -> None:
    error = _refused(
        tmp_path, ("qa-one", {"echo": f"{HERE}:ECHO"}), ("qa-two", {"echo-again": f"{HERE}:ECHO"})
    )
    assert error.code == "action_type_duplicate"
    assert "qa-one" in str(error)
    assert "qa-two" in str(error)


@pytest.mark.parametrize(
    ("specs", "code"),
    [
        ([installed_actions.CLASHING], "action_type_reserved"),
        ([installed_actions.SILENT], "action_evidence_missing"),
        ([installed_actions.LOOSE], "action_plan_model_invalid"),
        ([installed_actions.ECHO, installed_actions.ECHO], "action_type_duplicate"),
    ],
)
def test_a_spec_given_without_an_entry_point_is_checked_the_same(
    specs: list[contract.ActionSpec], code: str
) -> None:
    with pytest.raises(errors.ActionRegistrationError) as info:
        registry.given(specs)
    assert info.value.code == code
    assert "(given)" in str(info.value)
    assert registry.given([installed_actions.ECHO]).specs == {"test.echo": installed_actions.ECHO}


def test_a_built_in_type_is_reserved(tmp_path: Path) -> None:
    error = _refused(tmp_path, ("qa-clash", {"run.create": f"{HERE}:CLASHING"}))
    assert error.code == "action_type_reserved"
    assert "run.create is built in" in str(error)


class _BuiltInShaped(plans.BuiltInPlan):
    ACTION_TYPE: ClassVar[str] = "test.built_in_shaped"
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ()


def test_an_installed_plan_model_cannot_take_the_built_in_plans_base() -> None:
    # A `BuiltInPlan` is not checked for stability on every parse: only the built-ins are.
    spec = dataclasses.replace(
        installed_actions.MANUAL,
        action_type=_BuiltInShaped.ACTION_TYPE,
        plan_model=_BuiltInShaped,  # type: ignore[arg-type]  # what the check refuses
    )
    with pytest.raises(errors.ActionRegistrationError) as info:
        registry.given([spec])
    assert info.value.code == "action_plan_model_invalid"


def test_an_action_must_declare_its_evidence_or_manual_only(tmp_path: Path) -> None:
    error = _refused(tmp_path, ("qa-silent", {"test.manual": f"{HERE}:SILENT"}))
    assert error.code == "action_evidence_missing"
    assert "MANUAL_ONLY" in str(error)


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ("qa_no_such_module_anywhere:ACTION", "action_load_failed"),
        (f"{HERE}:NO_SUCH_ATTRIBUTE", "action_load_failed"),
        (f"{HERE}:NOT_A_SPEC", "action_spec_invalid"),
        (f"{HERE}:LOOSE", "action_plan_model_invalid"),
        (f"{HERE}:MISNAMED", "action_plan_model_invalid"),
        (f"{HERE}:MISSPELT", "action_plan_model_invalid"),
        (f"{HERE}:AIMLESS", "action_plan_model_invalid"),
        (f"{HERE}:SECRET_TARGET", "action_plan_model_invalid"),
    ],
)
def test_broken_declarations_are_refused_in_one_line(
    tmp_path: Path, target: str, code: str
) -> None:
    error = _refused(tmp_path, ("qa-broken", {"broken": target}))
    assert error.code == code
    assert "Traceback" not in str(error)


def test_a_failing_factory_is_refused_at_startup_without_its_message(tmp_path: Path) -> None:
    found = _load(tmp_path, ("qa-raises", {"echo": f"{HERE}:FACTORY_RAISES"}))
    ctx = contract.ActionContext(plans=contract.PlanReader(_NoPlans(), {}), clock=ManualClock())
    with pytest.raises(errors.ActionRegistrationError) as info:
        found.handlers(ctx)
    assert info.value.code == "action_handler_failed"
    assert "RuntimeError" in str(info.value)
    assert "secret" not in str(info.value)


def test_registration_errors_are_configuration_errors() -> None:
    # The CLI maps a ConfigurationError to exit 78 (docs/cli.md).
    assert issubclass(errors.ActionRegistrationError, errors.ConfigurationError)


class _NoPlans:
    plan_digests = digests.PLAIN

    async def get_plan(self, project_id: str, action_ref: str) -> ports.StoredPlan | None:
        return None

    async def get_plans(self, keys: Sequence[tuple[str, str]]) -> list[ports.StoredPlan]:
        return []
