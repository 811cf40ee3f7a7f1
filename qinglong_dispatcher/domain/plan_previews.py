"""The redacted preview of a plan: every field, the sensitive ones as size and digest prefix.

An approver must see what they approve without a plan's customer data reaching a terminal,
a log or a pasted ticket. The plan model names its sensitive fields (`SENSITIVE_FIELDS`);
the preview shows every other field as it is and each sensitive one as
`{"redacted": true, "bytes": n, "digest": "<12 hex>"}`: the size of its canonical JSON and
the first 48 bits of its digest in domain `qinglong/plan-field@v1` (keyed with the plan key
ring's digest secret where there is one, like every plan digest), so two previews can be
compared field by field without either value being shown. Only fields the model declares
non-sensitive are ever shown: a member the model does not know, and every member of a plan
whose action type has no model in this process, is redacted (fail closed).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Final

from qinglong_dispatcher.domain import canonical, digests, errors, plans

IDENTITY_FIELDS: Final = plans.IDENTITY_MEMBERS
"""Members every plan carries and the store keeps in clear columns anyway: never sensitive."""

FIELD_TAG: Final = "qinglong/plan-field@v1"
"""Domain of a redacted field's digest: the field's value as canonical JSON."""

DIGEST_PREFIX_HEX: Final = 12
"""Hex digits of the field digest a preview shows (48 bits)."""

UNREADABLE: Final = "plan_unreadable"
"""The code of a stored plan that is not a JSON object of canonical values."""

MISSING: Final = "plan_missing"
"""The code of a dispatch whose plan row is gone."""

ShownFields = Mapping[str, frozenset[str]]
"""The fields a preview shows as they are, per action type; a type not in it shows only
`IDENTITY_FIELDS`."""

IDENTITY_ONLY: Final[ShownFields] = MappingProxyType({})
"""Shows only `IDENTITY_FIELDS` of every plan: the default where no models are known."""


def member_names(model: type) -> frozenset[str]:
    """The JSON member names of a pydantic plan model (its aliases)."""
    fields: Mapping[str, object] = getattr(model, "model_fields", {})
    return frozenset(getattr(info, "alias", None) or name for name, info in fields.items())


def shown_fields(model: type) -> frozenset[str]:
    """The members of `model` a preview shows: all but its `SENSITIVE_FIELDS`."""
    sensitive = frozenset(getattr(model, "SENSITIVE_FIELDS", ()) or ())
    return member_names(model) - sensitive


def shown_by_type(models: Mapping[str, type]) -> dict[str, frozenset[str]]:
    """`shown_fields` of every model, by action type."""
    return {action_type: shown_fields(model) for action_type, model in models.items()}


def redacted(value: object, plan_digests: digests.PlanDigests) -> dict[str, object]:
    """What a preview shows of a sensitive value: its canonical size and digest prefix."""
    data = canonical.dumps(value)
    return {
        "redacted": True,
        "bytes": len(data),
        "digest": plan_digests.of(FIELD_TAG, data)[:DIGEST_PREFIX_HEX],
    }


def preview(
    plan_json: str, shown: Collection[str], plan_digests: digests.PlanDigests
) -> dict[str, object] | None:
    """Every member of a stored canonical plan, those not in `shown` redacted; None when the
    text is not a JSON object of canonical values (the caller shows `UNREADABLE`)."""
    try:
        plan = json.loads(plan_json)
    except ValueError:
        return None
    if not isinstance(plan, dict):
        return None
    result: dict[str, object] = {}
    try:
        for name in sorted(plan):
            value = plan[name]
            if name in shown or name in IDENTITY_FIELDS:
                canonical.dumps(value)  # a shown value is still a canonical one
                result[name] = value
            else:
                result[name] = redacted(value, plan_digests)
    except errors.CanonicalJsonError:
        return None
    return result


def preview_of(
    action_type: str, plan_json: str, shown: ShownFields, plan_digests: digests.PlanDigests
) -> dict[str, object] | None:
    """`preview` with the shown members of `action_type` (only identity for an unknown type)."""
    return preview(plan_json, shown.get(action_type, IDENTITY_FIELDS), plan_digests)
