"""Every action package, built in or installed, has one shape: plan, handler, evidence, ACTION."""

from __future__ import annotations

import importlib
import pathlib
import pkgutil

import pydantic
import pytest

from qinglong_dispatcher import actions, ports
from qinglong_dispatcher.actions import builtin, contract, registry
from qinglong_dispatcher.actions.run_create import tables as run_create_tables
from qinglong_dispatcher.actions.tool_invoke import tables as tool_invoke_tables
from qinglong_dispatcher.adapters.sql import store
from qinglong_dispatcher.domain import plans

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "qinglong-action-note"
PACKAGES = sorted(m.name for m in pkgutil.iter_modules(actions.__path__) if m.ispkg)
"""Every action package in the tree: each is a built-in action, registered once."""


def test_every_action_package_is_registered_once() -> None:
    specs = [importlib.import_module(f"{actions.__name__}.{p}").ACTION for p in PACKAGES]
    assert "command_run" in PACKAGES
    assert len(builtin.BUILT_IN) == len(set(builtin.BUILT_IN)) == len(specs)
    assert set(specs) == set(builtin.BUILT_IN)


def test_the_built_in_specs_are_the_built_in_plan_models_and_the_reserved_types() -> None:
    by_type = {spec.action_type: spec for spec in builtin.BUILT_IN}
    models = builtin.PLAN_MODELS
    assert set(by_type) == set(models) == registry.BUILT_IN
    for action_type, spec in by_type.items():
        assert spec.plan_model is models[action_type]
        assert action_type == spec.plan_model.ACTION_TYPE


def test_the_domain_keeps_no_action_plan() -> None:
    # The plan machinery only: every model is in its action's own `plan` module.
    bases = {plans.BuiltInPlan, plans.PlanModel}
    models = [
        value
        for value in vars(plans).values()
        if isinstance(value, type) and issubclass(value, pydantic.BaseModel)
    ]
    assert bases <= set(models)
    assert not [m for m in models if m not in bases and issubclass(m, tuple(bases))]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_built_in_action_is_a_package_with_a_plan_a_handler_an_evidence_provider_and_its_spec(
    package: str,
) -> None:
    module = importlib.import_module(f"qinglong_dispatcher.actions.{package}")
    plan = importlib.import_module(f"qinglong_dispatcher.actions.{package}.plan")
    handler = importlib.import_module(f"qinglong_dispatcher.actions.{package}.handler")
    evidence = importlib.import_module(f"qinglong_dispatcher.actions.{package}.evidence")
    assert isinstance(module.ACTION, contract.BuiltInSpec)
    assert module.ACTION.action_type == plan.ACTION_TYPE == handler.ACTION_TYPE
    assert module.ACTION.plan_model.__module__ == plan.__name__
    assert module.ACTION.evidence is not contract.MANUAL_ONLY
    assert any(
        getattr(cls, "action_type", None) == handler.ACTION_TYPE for cls in vars(evidence).values()
    )


def test_the_example_package_has_the_same_modules_as_a_built_in_one() -> None:
    modules = {p.stem for p in (EXAMPLE / "qinglong_action_note").glob("*.py")}
    assert {"__init__", "plan", "handler", "evidence"} <= modules
    source = (EXAMPLE / "qinglong_action_note" / "__init__.py").read_text(encoding="utf-8")
    assert "ACTION = contract.ActionSpec(" in source


def test_an_action_repository_is_its_own_and_the_store_has_none_of_its_methods() -> None:
    # Each built-in action builds its repository over the store (docs/decisions/0032): the
    # store forwards none of them, so its port stays the store's own.
    for port, repository in (
        (ports.RunCreateRepository, run_create_tables.Repository),
        (ports.ToolSteps, tool_invoke_tables.Repository),
    ):
        methods = {
            name
            for klass in port.__mro__
            if klass.__module__.startswith("qinglong_dispatcher.ports")
            for name, member in vars(klass).items()
            if callable(member) and not name.startswith("_")
        }
        assert methods
        assert all(callable(getattr(repository, name, None)) for name in methods)
        assert not {name for name in methods if hasattr(store.SqlStore, name)}
