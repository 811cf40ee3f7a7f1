"""The built-in actions, built from their specs like the installed ones are from theirs.

`BUILT_IN` is where a built-in action is registered; everything else about it (its plan,
handler, evidence, own settings and tables) is in its package."""

from __future__ import annotations

from typing import Final

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import (
    command_run,
    contract,
    http_request,
    mcp_call,
    run_create,
    tool_invoke,
)
from qinglong_dispatcher.actions.settings import ActionSettings
from qinglong_dispatcher.domain import plans

BUILT_IN: Final[tuple[contract.BuiltInSpec, ...]] = (
    run_create.ACTION,
    tool_invoke.ACTION,
    http_request.ACTION,
    command_run.ACTION,
    mcp_call.ACTION,
)
"""Every built-in action."""

PLAN_MODELS: Final[plans.PlanModels] = {spec.action_type: spec.plan_model for spec in BUILT_IN}
"""Every built-in action's plan model, each kept in its action's package: passed to parsing
like an installed one's, and reserved (no entry point may declare its type)."""

SETTINGS: Final[tuple[type[ActionSettings], ...]] = tuple(
    spec.settings for spec in BUILT_IN if spec.settings is not None
)
"""The built-in actions' own settings models: the global settings read their fields too."""


def own_settings(given: object) -> dict[type[ActionSettings], ActionSettings]:
    """Each action's own settings, taken from `given` (the process's settings, validated with
    every model's fields at load): an action gets only its own."""
    return {
        model: model.model_construct(**{name: getattr(given, name) for name in model.model_fields})
        for model in SETTINGS
    }


def handlers(ctx: contract.BuiltInContext) -> dict[str, ports.ApprovedActionHandler]:
    """The handler of every built-in action configured in this process, by action type."""
    built: dict[str, ports.ApprovedActionHandler] = {}
    for spec in BUILT_IN:
        handler = spec.handler(ctx)
        if handler is not None:
            built[spec.action_type] = handler
    return built


def evidence_providers(ctx: contract.BuiltInContext) -> dict[str, ports.EvidenceProvider]:
    """The evidence provider of every built-in action that has one, by action type."""
    return {
        spec.action_type: spec.evidence(ctx)
        for spec in BUILT_IN
        if spec.evidence is not contract.MANUAL_ONLY
    }
