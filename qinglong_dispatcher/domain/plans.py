"""Action plans: exact-shape, versioned models parsed from outside and hashed for approval."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias

import pydantic
from pydantic import ConfigDict, Field, StringConstraints

from qinglong_dispatcher.domain import canonical, digests, errors

IDENTIFIER_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
"""Opaque identifiers: project, task, action ref, operator names, result and reason codes."""

IDENTITY_MEMBERS: Final = frozenset({"schemaVersion", "actionRef", "projectId"})
"""The members every plan carries; never sensitive (the store keeps them in clear columns)."""

_IDENTIFIER_RULE: Final = "must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
# fullmatch, because `$` in Python also matches before a trailing newline.
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN[1:-1])
# Unknown keys are named in errors only when they look like field names.
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

Identifier = Annotated[str, StringConstraints(strict=True, pattern=IDENTIFIER_PATTERN)]
"""An identifier field: a str matching IDENTIFIER_PATTERN, never coerced."""


def is_identifier(value: object) -> bool:
    """Whether `value` is a str matching IDENTIFIER_PATTERN."""
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def require_identifier(name: str, value: str) -> str:
    """Return `value` if it is an identifier, else raise `InvalidInput` naming `name`."""
    if not is_identifier(value):
        raise errors.InvalidInput(f"{name}: {_IDENTIFIER_RULE}")
    return value


class _ExactShapePlan(pydantic.BaseModel):
    """What every plan model shares: exact shape (strict, frozen, unknown fields refused), its
    action type, and its canonical members."""

    # defer_build: a schema is built when a model first validates, so a command that never
    # reads a plan (status, list) does not pay for building every one at import.
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, populate_by_name=False, defer_build=True
    )

    ACTION_TYPE: ClassVar[str]
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]]
    """The top-level members a redacted preview shows only as size and digest prefix
    (`domain/plan_previews.py`): whatever may carry customer data or secrets."""
    TARGET_MEMBER: ClassVar[str | None] = None
    """The top-level member (its JSON name) naming what the action changes — a router, a host,
    a project — or None: no target. Its value, an identifier or null, is the plan's target:
    the database lets at most one dispatch per target past its claim (`plan_target`)."""

    @property
    def action_type(self) -> str:
        """The action type this plan belongs to."""
        return self.ACTION_TYPE

    def to_canonical_dict(self) -> dict[str, object]:
        """The plan as camelCase JSON members, with an explicit None for absent optionals."""
        return self.model_dump(by_alias=True, mode="python")


class BuiltInPlan(_ExactShapePlan):
    """Base of `run.create`'s and `tool.invoke`'s plan models (`actions/<name>/plan.py`).

    Exact shape like `PlanModel`, but parsed as these two always were, so that their stored
    approvals, digests and error lines stay what they are: `schemaVersion` other than 1 reads
    "must be 1", and no stability check on every parse (the tests prove both models stable).
    An installed action cannot use it: the registry takes only a `PlanModel`.
    """

    schema_version: Literal[1] = Field(alias="schemaVersion")
    action_ref: Identifier = Field(alias="actionRef")
    project_id: Identifier = Field(alias="projectId")

    @pydantic.field_validator("schema_version", mode="before")
    @classmethod
    def _exact_version(cls, value: object) -> object:
        # Literal[1] alone, even strict, accepts True and 1.0, which equal 1 in Python.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("must be 1")
        return value


class PlanModel(_ExactShapePlan):
    """Base of an installed action's plan model (entry-point group `qinglong_dispatcher.actions`).

    Exact shape like the built-in plans: strict, frozen, unknown fields refused; every plan
    carries `schemaVersion`, `actionRef` and `projectId`. A subclass sets `ACTION_TYPE` and
    adds its own fields (camelCase aliases, JSON types only: canonical JSON has no floats).

    `SENSITIVE_FIELDS` fails closed: a model that does not declare it in its own body has
    every member but `schemaVersion`, `actionRef` and `projectId` sensitive (a subclass of a
    model that declared it must declare it again: it may have added a member).
    """

    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ()

    schema_version: Literal[1] = Field(alias="schemaVersion")
    action_ref: Identifier = Field(alias="actionRef")
    project_id: Identifier = Field(alias="projectId")

    @pydantic.field_validator("schema_version", mode="before")
    @classmethod
    def _exact_version(cls, value: object) -> object:
        # As in `BuiltInPlan`: Literal[1] alone accepts True and 1.0.
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError("must be an integer")
        return value

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "SENSITIVE_FIELDS" not in cls.__dict__:
            cls.SENSITIVE_FIELDS = tuple(
                sorted(
                    (info.alias or name)
                    for name, info in cls.model_fields.items()
                    if (info.alias or name) not in IDENTITY_MEMBERS
                )
            )


AnyPlan: TypeAlias = BuiltInPlan | PlanModel
"""A plan of any action: built in or installed."""

PlanModels: TypeAlias = Mapping[str, type[BuiltInPlan] | type[PlanModel]]
"""Plan models by action type: the built-in actions' and the installed ones' (kept in their
action's package and passed in: the domain knows no action's plan)."""


def _field_name(loc: tuple[int | str, ...]) -> str:
    if not loc:
        return "plan"
    parts = [part if isinstance(part, str) and _FIELD_NAME.fullmatch(part) else "?" for part in loc]
    return ".".join(parts)


def _reason(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx: Mapping[str, object] = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "model_type" or kind == "dict_type":
        return "must be a JSON object"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind == "greater_than_equal":
        return f"must be an integer >= {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be an integer <= {ctx['le']}"
    if kind == "literal_error":
        return f"must be {ctx['expected']}"
    if kind == "string_type":
        return "must be a string"
    if kind == "string_unicode":
        return "must be valid Unicode text"
    if kind == "string_pattern_mismatch":
        return _IDENTIFIER_RULE
    if kind == "string_too_short":
        if ctx["min_length"] == 1:
            return "must not be empty"
        return f"must be at least {ctx['min_length']} characters long"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters long"
    if kind == "invalid_key":
        return "field names must be strings"
    if kind == "value_error":
        # Only our own validators raise ValueError, and their messages hold no input.
        return str(ctx.get("error", "invalid value"))
    return f"invalid value ({kind})"


def _json_path_as_field(message: str) -> str:
    # "$.taskRevision: …" reads as "taskRevision: …", "$: …" as "plan: …", like model errors.
    if message.startswith("$."):
        return message[2:]
    return "plan" + message[1:] if message.startswith("$") else message


def _plan_invalid(exc: pydantic.ValidationError) -> errors.PlanInvalid:
    """One line: every missing field at once (a plan written by hand rarely lacks just one,
    and naming one per try makes a round trip per field), then the first other problem."""
    found = exc.errors(include_url=False, include_context=True, include_input=False)
    missing = [_field_name(e["loc"]) for e in found if e["type"] == "missing"]
    others = [e for e in found if e["type"] != "missing"]
    parts = []
    if len(missing) == 1:
        parts.append(f"{missing[0]}: required field is missing")
    elif missing:
        parts.append(f"{', '.join(missing)}: required fields are missing")
    if others:
        parts.append(f"{_field_name(others[0]['loc'])}: {_reason(others[0])}")
    return errors.PlanInvalid("plan invalid: " + "; ".join(parts))


def _model_for(
    action_type: str, models: PlanModels | None
) -> type[BuiltInPlan] | type[PlanModel] | None:
    if not isinstance(action_type, str):
        return None
    return (models or {}).get(action_type)


def _validate(model: type[BuiltInPlan] | type[PlanModel], value: object) -> AnyPlan:
    try:
        return model.model_validate(value, strict=True)
    except pydantic.ValidationError as exc:
        raise _plan_invalid(exc) from None
    except Exception as exc:
        if not issubclass(model, PlanModel):
            raise
        # An installed model's own code failed: still one line, never a traceback.
        raise errors.PlanInvalid(
            f"plan invalid: plan: the plan model raised {exc.__class__.__name__}",
            code="plan_model_failed",
        ) from None


def _require_stable(plan: PlanModel) -> None:
    """An installed plan must survive canonical JSON unchanged, or its digest would not bind it.

    A `BuiltInPlan` is stable by construction (tests prove it); an installed one is checked
    on every parse: dump, parse again, dump again — the same plan and the same bytes.
    """
    try:
        data = canonical.dumps(plan.to_canonical_dict())
    except errors.CanonicalJsonError as exc:
        raise errors.PlanInvalid(f"plan invalid: {_json_path_as_field(str(exc))}") from None
    try:
        again = type(plan).model_validate(json.loads(data), strict=True)
        stable = again == plan and canonical.dumps(again.to_canonical_dict()) == data
    except Exception:  # an installed model's own code: any failure means not stable
        stable = False
    if not stable:
        raise errors.PlanInvalid(
            "plan invalid: plan: the plan model does not survive canonical JSON unchanged",
            code="plan_not_canonical",
        )


def parse_plan(
    action_type: str, data: Mapping[str, object] | bytes, *, models: PlanModels | None = None
) -> AnyPlan:
    """Parse a plan of `action_type` from canonical-JSON bytes or an already-decoded mapping.

    `models` are the plan models the caller knows (`actions.builtin.PLAN_MODELS`, and the
    installed ones where it loaded them). Raises `UnknownActionType` for a type without a
    model and `PlanInvalid` (one line, naming every missing field and the first other failing
    one by their JSON names, never a value) for anything else: malformed or non-strict JSON,
    unknown fields, wrong version, wrong types, out-of-range values, and an
    installed model whose plan does not survive canonical JSON unchanged.
    """
    model = _model_for(action_type, models)
    if model is None:
        shown = action_type if is_identifier(action_type) else "?"
        raise errors.UnknownActionType(f"unknown action type: {shown}")
    value: object = data
    if isinstance(data, bytes | bytearray | str):
        try:
            value = canonical.loads(data)
        except errors.CanonicalJsonError as exc:
            raise errors.PlanInvalid(f"plan invalid: {_json_path_as_field(str(exc))}") from exc
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    plan = _validate(model, value)
    if isinstance(plan, PlanModel):
        _require_stable(plan)
    return plan


def resolve_plan(
    action_type: str,
    data: bytes,
    *,
    approved_digest: str,
    plan_digests: digests.PlanDigests,
    models: PlanModels | None = None,
) -> tuple[AnyPlan, str]:
    """A stored plan and its action digest, checked against the digest its approval bound.

    Bytes the approved digest binds (`plan_digests.bound`) are the approved plan's canonical
    bytes, byte for byte, and passed every canonical-JSON rule when they were approved: they
    are decoded plainly and only validated by the model again. Any other bytes take the whole
    strict parse and their digest is computed from the parsed plan, so a drift is still
    reported as drift and an invalid plan as invalid. (Half the replica's Python per dispatch
    was the strict parse and the two canonical dumps of a plan whose digest already proved it.)
    """
    digest = plan_digests.bound(action_type, data, approved_digest)
    model = _model_for(action_type, models)
    if digest == approved_digest and model is not None:
        return _validate(model, json.loads(data)), digest
    plan = parse_plan(action_type, data, models=models)
    return plan, plan_action_digest(plan, plan_digests)


def plan_target(plan: AnyPlan) -> str | None:
    """The plan's target: the value of its model's `TARGET_MEMBER` (None without one, or where
    the member is null). The registry checks the member exists and is not sensitive; the value
    must be an identifier (`PlanInvalid` otherwise: the database keeps it in clear)."""
    member = plan.TARGET_MEMBER
    if member is None:
        return None
    value = plan.to_canonical_dict().get(member)
    if value is None:
        return None
    if not is_identifier(value):
        raise errors.PlanInvalid(f"plan invalid: {member}: a target {_IDENTIFIER_RULE}")
    assert isinstance(value, str)
    return value


def plan_canonical(plan: AnyPlan) -> bytes:
    """The plan's canonical JSON bytes (what ActionPlans stores as `plan_json`)."""
    return canonical.dumps(plan.to_canonical_dict())


def plan_action_digest(plan: AnyPlan, plan_digests: digests.PlanDigests) -> str:
    """The action digest an approval binds: action type and plan together."""
    return plan_digests.action_digest(plan.ACTION_TYPE, plan.to_canonical_dict())
