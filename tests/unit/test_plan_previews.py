"""A plan's redacted preview: every member, the sensitive ones only as size and digest prefix;
and every plan model says which of its members are sensitive, installed ones failing closed."""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar

import pytest

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.domain import digests, plan_previews, plans
from tests.support import installed_actions

MARKER = "MARKER-7f3a-secret"

TOOL_PLAN = {
    "schemaVersion": 1,
    "actionRef": "act-1",
    "projectId": "p1",
    "runId": "r-1",
    "stepRunId": "s-1",
    "toolId": "builtin.file.write",
    "toolVersion": 1,
    "content": f"héllo {MARKER}",
}
SHOWN = plan_previews.shown_by_type(builtin.PLAN_MODELS)


def _field_digest(value: object) -> str:
    data = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(b"qinglong/plan-field@v1\0" + data.encode()).hexdigest()[:12]


def test_a_sensitive_member_is_shown_only_as_its_size_and_digest_prefix() -> None:
    shown = plan_previews.preview_of("tool.invoke", json.dumps(TOOL_PLAN), SHOWN, digests.PLAIN)
    assert shown is not None
    content = json.dumps(TOOL_PLAN["content"], ensure_ascii=False).encode()
    assert shown["content"] == {
        "redacted": True,
        "bytes": len(content),
        "digest": _field_digest(TOOL_PLAN["content"]),
    }
    assert MARKER not in json.dumps(shown)
    assert {k: v for k, v in shown.items() if k != "content"} == {
        k: v for k, v in TOOL_PLAN.items() if k != "content"
    }


def test_the_digest_prefix_is_stable_and_tells_equal_values_from_different_ones() -> None:
    first = plan_previews.redacted(["a", "1"], digests.PLAIN)
    # Pinned: a preview printed today compares with one printed by any later release.
    assert first == {"redacted": True, "bytes": 9, "digest": "b4704f0bbe0d"}
    assert first["digest"] == _field_digest(["a", "1"])
    assert plan_previews.redacted(["a", "2"], digests.PLAIN)["digest"] != first["digest"]
    # Domain-separated: not the plain SHA-256 of the value, nor another domain's digest.
    assert first["digest"] != hashlib.sha256(b'["a","1"]').hexdigest()[:12]


def test_every_member_is_shown_in_order_and_an_undeclared_one_is_redacted() -> None:
    plan = {**TOOL_PLAN, "surprise": MARKER}
    shown = plan_previews.preview_of("tool.invoke", json.dumps(plan), SHOWN, digests.PLAIN)
    assert shown is not None
    assert list(shown) == sorted(plan)
    assert shown["surprise"] == plan_previews.redacted(MARKER, digests.PLAIN)


def test_an_action_type_without_a_model_here_shows_only_its_identity() -> None:
    plan = {"schemaVersion": 1, "actionRef": "a1", "projectId": "p", "note": MARKER}
    shown = plan_previews.preview_of("someone.else", json.dumps(plan), SHOWN, digests.PLAIN)
    assert shown == {**plan, "note": plan_previews.redacted(MARKER, digests.PLAIN)}


@pytest.mark.parametrize("text", ["{not json", "[1]", '{"a": 1.5}'])
def test_a_plan_that_is_not_a_canonical_object_has_no_preview(text: str) -> None:
    assert plan_previews.preview_of("run.create", text, SHOWN, digests.PLAIN) is None


def test_the_built_in_models_declare_what_may_carry_customer_data() -> None:
    declared = {
        action_type: model.SENSITIVE_FIELDS for action_type, model in builtin.PLAN_MODELS.items()
    }
    assert declared == {
        "run.create": (),
        "tool.invoke": ("content",),
        "http.request": ("query", "headers", "body"),
        "command.run": ("args",),
        "mcp.call": ("arguments",),
    }
    for model in builtin.PLAN_MODELS.values():
        assert set(model.SENSITIVE_FIELDS) <= plan_previews.member_names(model)


class _Quiet(plans.PlanModel):
    ACTION_TYPE: ClassVar[str] = "test.quiet"

    note: str
    count: int


class _Declared(_Quiet):
    SENSITIVE_FIELDS: ClassVar[tuple[str, ...]] = ("note",)


class _Grown(_Declared):
    extra: str


def test_an_installed_model_that_declares_nothing_has_every_member_but_identity_sensitive() -> None:
    assert _Quiet.SENSITIVE_FIELDS == ("count", "note")
    assert plan_previews.shown_fields(_Quiet) == plans.IDENTITY_MEMBERS
    assert installed_actions.EchoPlan.SENSITIVE_FIELDS == ("answer",)


def test_a_declaration_holds_for_its_own_model_and_a_subclass_must_declare_again() -> None:
    assert plan_previews.shown_fields(_Declared) == plans.IDENTITY_MEMBERS | {"count"}
    assert _Grown.SENSITIVE_FIELDS == ("count", "extra", "note")
