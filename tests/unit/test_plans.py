"""Plans: exact shape, strict types, one-line typed errors for any input."""

from __future__ import annotations

import hashlib
import json
from types import MappingProxyType

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong_dispatcher.actions import builtin
from qinglong_dispatcher.actions.run_create import plan as run_create_plan
from qinglong_dispatcher.domain import canonical, digests, errors, plans

MAX = canonical.MAX_SAFE_INTEGER
IDENTIFIER_RULE = "must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}"

GOOD: dict[str, object] = {
    "schemaVersion": 1,
    "actionRef": "ar-1",
    "projectId": "p1",
    "taskId": "t1",
    "taskRevision": 0,
    "executorType": "shell",
    "priority": 0,
}
WITH_INT_KEY: dict[object, object] = dict(GOOD.items())
WITH_INT_KEY[3] = 1
TYPED = (errors.PlanInvalid, errors.UnknownActionType)

identifiers = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z")
valid_plans = st.fixed_dictionaries(
    {
        "schemaVersion": st.just(1),
        "actionRef": identifiers,
        "projectId": identifiers,
        "taskId": identifiers,
        "taskRevision": st.integers(0, MAX),
        "executorType": identifiers,
        "priority": st.integers(-1000, 1000),
    },
    optional={
        "taskName": st.text(
            alphabet=st.characters(blacklist_categories=("C", "Zl", "Zp")),
            min_size=1,
            max_size=40,
        ).filter(str.isprintable),
        "taskSnapshotRef": identifiers | st.none(),
        "inputRef": identifiers | st.none(),
    },
)
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.binary(max_size=4),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(max_size=12) | st.integers(), children, max_size=4)
    ),
    max_leaves=10,
)


def _plan_error(data: object, action_type: str = "run.create") -> str:
    with pytest.raises(errors.PlanInvalid) as info:
        plans.parse_plan(action_type, data, models=builtin.PLAN_MODELS)  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("plan invalid: ")
    return message


def _assert_typed(exc: BaseException) -> None:
    assert isinstance(exc, TYPED), repr(exc)
    assert "\n" not in str(exc)
    assert "Traceback" not in str(exc)


# -- identifiers -------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a", "A.b_c:d-e", "0", "x" * 128])
def test_identifier_accepts(value: str) -> None:
    assert plans.is_identifier(value)
    assert plans.require_identifier("projectId", value) == value


@pytest.mark.parametrize(
    "value", ["", "-a", ".a", "a b", "a/b", "x" * 129, "a\n", "é", "a\x00", 7, None, b"a"]
)
def test_identifier_refuses(value: object) -> None:
    assert not plans.is_identifier(value)
    with pytest.raises(errors.InvalidInput) as info:
        plans.require_identifier("projectId", value)  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test
    assert str(info.value) == f"projectId: {IDENTIFIER_RULE}"
    assert not isinstance(info.value, errors.PlanInvalid)


def test_identifier_type_is_strict_and_anchored() -> None:
    adapter = pydantic.TypeAdapter(plans.Identifier)
    assert adapter.validate_python("a.b") == "a.b"
    for bad in ("a\n", "", 1):
        with pytest.raises(pydantic.ValidationError):
            adapter.validate_python(bad)


# -- the model ---------------------------------------------------------------------------


def test_parse_minimal_plan() -> None:
    plan = plans.parse_plan("run.create", GOOD, models=builtin.PLAN_MODELS)
    assert isinstance(plan, run_create_plan.RunCreatePlan)
    assert plan.schema_version == 1
    assert plan.project_id == "p1"
    assert plan.task_name is None
    assert plan.action_type == run_create_plan.RunCreatePlan.ACTION_TYPE == "run.create"
    assert builtin.PLAN_MODELS["run.create"] is run_create_plan.RunCreatePlan
    assert plan.to_canonical_dict() == {
        **GOOD,
        "taskName": None,
        "taskSnapshotRef": None,
        "inputRef": None,
    }


def test_plan_is_frozen() -> None:
    plan = plans.parse_plan("run.create", GOOD, models=builtin.PLAN_MODELS)
    assert isinstance(plan, run_create_plan.RunCreatePlan)
    with pytest.raises(pydantic.ValidationError):
        plan.priority = 5  # type: ignore[misc]  # assigning a frozen field is what is tested


def test_plan_canonical_and_digest_known_answer() -> None:
    plan = plans.parse_plan(
        "run.create",
        {**GOOD, "taskName": "Crème brûlée", "taskRevision": 12, "priority": -3},
        models=builtin.PLAN_MODELS,
    )
    expected = (
        b'{"actionRef":"ar-1","executorType":"shell","inputRef":null,"priority":-3,'
        b'"projectId":"p1","schemaVersion":1,"taskId":"t1",'
        b'"taskName":"Cr\xc3\xa8me br\xc3\xbbl\xc3\xa9e","taskRevision":12,"taskSnapshotRef":null}'
    )
    assert plans.plan_canonical(plan) == expected
    envelope = b'{"actionType":"run.create","plan":' + expected + b"}"
    assert (
        plans.plan_action_digest(plan, digests.PLAIN)
        == hashlib.sha256(b"qinglong/approved-action@v1\x00" + envelope).hexdigest()
    )
    assert plans.plan_action_digest(plan, digests.PLAIN) == digests.PLAIN.action_digest(
        "run.create", plan.to_canonical_dict()
    )


def test_parse_from_bytes_and_mapping_agree() -> None:
    data = json.dumps({**GOOD, "inputRef": "in-1"}).encode()
    from_bytes = plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)
    from_mapping = plans.parse_plan(
        "run.create", MappingProxyType({**GOOD, "inputRef": "in-1"}), models=builtin.PLAN_MODELS
    )
    assert from_bytes == from_mapping
    assert isinstance(from_bytes, run_create_plan.RunCreatePlan)
    assert from_bytes.input_ref == "in-1"


@settings(max_examples=150)
@given(raw=valid_plans)
def test_round_trip_through_canonical_bytes(raw: dict[str, object]) -> None:
    plan = plans.parse_plan("run.create", raw, models=builtin.PLAN_MODELS)
    data = plans.plan_canonical(plan)
    assert canonical.is_canonical(data)
    again = plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)
    assert again == plan
    assert plans.plan_action_digest(again, digests.PLAIN) == plans.plan_action_digest(
        plan, digests.PLAIN
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extraField": 1}, "extraField: unknown field"),
        ({"task_id": "t"}, "task_id: unknown field"),
        ({"schemaVersion": 2}, "schemaVersion: must be 1"),
        ({"schemaVersion": 0}, "schemaVersion: must be 1"),
        ({"schemaVersion": True}, "schemaVersion: must be 1"),
        ({"schemaVersion": 1.0}, "schemaVersion: must be 1"),
        ({"schemaVersion": "1"}, "schemaVersion: must be 1"),
        ({"taskRevision": -1}, "taskRevision: must be an integer >= 0"),
        ({"taskRevision": MAX + 1}, f"taskRevision: must be an integer <= {MAX}"),
        ({"taskRevision": 10**500}, f"taskRevision: must be an integer <= {MAX}"),
        ({"taskRevision": True}, "taskRevision: must be an integer"),
        ({"taskRevision": 1.0}, "taskRevision: must be an integer"),
        ({"taskRevision": "1"}, "taskRevision: must be an integer"),
        ({"priority": 1001}, "priority: must be an integer <= 1000"),
        ({"priority": -1001}, "priority: must be an integer >= -1000"),
        ({"priority": False}, "priority: must be an integer"),
        ({"priority": float("nan")}, "priority: must be an integer"),
        ({"projectId": "no spaces"}, f"projectId: {IDENTIFIER_RULE}"),
        ({"projectId": 5}, "projectId: must be a string"),
        ({"actionRef": "x" * 129}, f"actionRef: {IDENTIFIER_RULE}"),
        ({"inputRef": ""}, f"inputRef: {IDENTIFIER_RULE}"),
        ({"taskName": ""}, "taskName: must not be empty"),
        ({"taskName": "x" * 201}, "taskName: must be at most 200 characters long"),
        (
            {"taskName": "line\nbreak"},
            "taskName: must be printable text without control characters",
        ),
        (
            {"taskName": "zero\u200bwidth"},
            "taskName: must be printable text without control characters",
        ),
        ({"taskName": "\ud800"}, "taskName: must be valid Unicode text"),
        ({"has space": 1}, "?: unknown field"),
    ],
)
def test_invalid_plans_name_field_and_reason(change: dict[str, object], message: str) -> None:
    assert _plan_error({**GOOD, **change}) == f"plan invalid: {message}"


def test_error_never_echoes_the_value() -> None:
    secret = "s3cr3t-value"
    for change in ({"projectId": secret + " !"}, {"taskName": secret + "\x07"}):
        assert secret not in _plan_error({**GOOD, **change})


def test_missing_field() -> None:
    raw = dict(GOOD)
    del raw["taskId"]
    assert _plan_error(raw) == "plan invalid: taskId: required field is missing"


def test_every_missing_field_is_named_at_once() -> None:
    """Not one per try: a hand-written plan lacking three fields hears of all three, and of
    the first other problem after them."""
    raw = {k: v for k, v in GOOD.items() if k not in ("taskId", "taskRevision", "executorType")}
    assert _plan_error(raw) == (
        "plan invalid: taskId, taskRevision, executorType: required fields are missing"
    )
    raw["taskid"] = "t"
    assert _plan_error(raw) == (
        "plan invalid: taskId, taskRevision, executorType: required fields are missing; "
        "taskid: unknown field"
    )


def test_snake_case_names_are_not_accepted() -> None:
    snake = {
        "schema_version": 1,
        "action_ref": "a",
        "project_id": "p",
        "task_id": "t",
        "task_revision": 0,
        "executor_type": "e",
        "priority": 0,
    }
    assert _plan_error(snake).startswith("plan invalid: ")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[1]", "plan invalid: plan: must be a JSON object"),
        (b"null", "plan invalid: plan: must be a JSON object"),
        ([GOOD], "plan invalid: plan: must be a JSON object"),
        (b'{"taskRevision":1.5}', "plan invalid: taskRevision: floats are not allowed"),
        (b'{"priority":1,"priority":2}', "plan invalid: plan: duplicate object key"),
        (b"\xff", "plan invalid: plan: input is not valid UTF-8"),
        (b"{", "plan invalid: plan: not valid JSON (Expecting property name enclosed"),
        (b"[" + b"1" * 5000 + b"]", "plan invalid: plan[0]: integer outside"),
        (b" " * (canonical.PLAN_MAX_BYTES + 1), "plan invalid: plan: input is larger than"),
        (WITH_INT_KEY, "plan invalid: ?: field names must be strings"),
    ],
)
def test_malformed_input_is_plan_invalid(data: object, message: str) -> None:
    assert _plan_error(data).startswith(message)


def test_float_in_bytes_is_refused_even_when_integral() -> None:
    data = json.dumps({**GOOD, "taskRevision": 2.0}).encode()
    assert _plan_error(data) == "plan invalid: taskRevision: floats are not allowed"


@pytest.mark.parametrize("action_type", ["tool.unknown", "", "run.create ", 7, None])
def test_unknown_action_type(action_type: object) -> None:
    with pytest.raises(errors.UnknownActionType) as info:
        plans.parse_plan(action_type, GOOD, models=builtin.PLAN_MODELS)  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test
    assert str(info.value).startswith("unknown action type: ")
    assert "\n" not in str(info.value)


# -- nothing but typed errors ------------------------------------------------------------


@settings(max_examples=200)
@given(data=st.binary(max_size=80))
def test_any_bytes_raise_only_typed_errors(data: bytes) -> None:
    try:
        plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)
    except Exception as exc:
        _assert_typed(exc)


@settings(max_examples=200)
@given(value=junk)
def test_any_value_raises_only_typed_errors(value: object) -> None:
    for data in (value, json.dumps(value, default=repr).encode()):
        try:
            plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)  # type: ignore[arg-type]  # any junk, on purpose
        except Exception as exc:
            _assert_typed(exc)


@settings(max_examples=200)
@given(field=st.sampled_from([*GOOD, "taskName", "taskSnapshotRef", "inputRef"]), value=junk)
def test_any_field_value_raises_only_typed_errors(field: str, value: object) -> None:
    raw = {**GOOD, field: value}
    for data in (raw, json.dumps(raw, default=repr).encode()):
        try:
            plan = plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)
        except Exception as exc:
            _assert_typed(exc)
        else:
            # Whatever got through can always be written and hashed.
            assert canonical.is_canonical(plans.plan_canonical(plan))
            plans.plan_action_digest(plan, digests.PLAIN)


# -- resolving a stored plan against its approved digest ----------------------------------


@settings(max_examples=60, deadline=None)
@given(valid_plans)
def test_resolving_the_approved_bytes_gives_the_strict_parse(data: dict[str, object]) -> None:
    plan = plans.parse_plan("run.create", data, models=builtin.PLAN_MODELS)
    stored = plans.plan_canonical(plan)
    approved = plans.plan_action_digest(plan, digests.PLAIN)
    resolved, digest = plans.resolve_plan(
        "run.create",
        stored,
        approved_digest=approved,
        plan_digests=digests.PLAIN,
        models=builtin.PLAN_MODELS,
    )
    assert resolved == plan
    assert digest == approved == digests.PLAIN.action_digest_of_canonical("run.create", stored)


def test_equivalent_bytes_that_are_not_canonical_take_the_strict_parse() -> None:
    plan = plans.parse_plan("run.create", GOOD, models=builtin.PLAN_MODELS)
    approved = plans.plan_action_digest(plan, digests.PLAIN)
    spaced = json.dumps(GOOD, indent=2).encode()
    resolved, digest = plans.resolve_plan(
        "run.create",
        spaced,
        approved_digest=approved,
        plan_digests=digests.PLAIN,
        models=builtin.PLAN_MODELS,
    )
    assert resolved == plan
    assert digest == approved  # the plan's canonical digest, not the digest of the bytes
    assert digests.PLAIN.action_digest_of_canonical("run.create", spaced) != approved


def test_other_bytes_get_their_own_digest_and_invalid_bytes_stay_invalid() -> None:
    approved = plans.plan_action_digest(
        plans.parse_plan("run.create", GOOD, models=builtin.PLAN_MODELS), digests.PLAIN
    )
    drifted = plans.plan_canonical(
        plans.parse_plan("run.create", {**GOOD, "priority": 7}, models=builtin.PLAN_MODELS)
    )
    _, digest = plans.resolve_plan(
        "run.create",
        drifted,
        approved_digest=approved,
        plan_digests=digests.PLAIN,
        models=builtin.PLAN_MODELS,
    )
    assert digest != approved
    with pytest.raises(errors.PlanInvalid):
        plans.resolve_plan(
            "run.create",
            b'{"priority": 1.5}',
            approved_digest=approved,
            plan_digests=digests.PLAIN,
            models=builtin.PLAN_MODELS,
        )
    # Even bytes whose digest is the approved one are validated by the model again.
    bad = canonical.dumps({**GOOD, "priority": 5000})
    with pytest.raises(errors.PlanInvalid, match="priority"):
        plans.resolve_plan(
            "run.create",
            bad,
            approved_digest=digests.PLAIN.action_digest_of_canonical("run.create", bad),
            plan_digests=digests.PLAIN,
            models=builtin.PLAN_MODELS,
        )
