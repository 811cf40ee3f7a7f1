"""Digests: domain separation and known answers computed here with hashlib."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong_dispatcher.domain import canonical, digests, errors

PLAN = {
    "schemaVersion": 1,
    "actionRef": "ref-1",
    "projectId": "proj",
    "taskId": "task:7",
    "taskRevision": 3,
    "executorType": "shell",
    "priority": -5,
    "taskName": "Café",
    "taskSnapshotRef": None,
    "inputRef": None,
}
PLAN_BYTES = (
    b'{"actionRef":"ref-1","executorType":"shell","inputRef":null,"priority":-5,'
    b'"projectId":"proj","schemaVersion":1,"taskId":"task:7","taskName":"Caf\xc3\xa9",'
    b'"taskRevision":3,"taskSnapshotRef":null}'
)


def test_tags() -> None:
    assert digests.ACTION_TAG == "qinglong/approved-action@v1"
    assert digests.PLAN_TAG == "qinglong/action-plan@v1"
    assert digests.RUN_RECEIPT_TAG == "qinglong/approved-run-receipt@v1"


def test_digest_is_domain_separated_sha256() -> None:
    expected = hashlib.sha256(b"qinglong/x@v2\x00[1]").hexdigest()
    assert digests.digest("qinglong/x@v2", b"[1]") == expected
    assert digests.digest("qinglong/y@v2", b"[1]") != expected
    assert expected == expected.lower()
    assert len(expected) == 64


def test_action_digest_known_answer() -> None:
    assert canonical.dumps(PLAN) == PLAN_BYTES
    envelope = b'{"actionType":"run.create","plan":' + PLAN_BYTES + b"}"
    expected = hashlib.sha256(b"qinglong/approved-action@v1\x00" + envelope).hexdigest()
    assert digests.PLAIN.action_digest("run.create", PLAN) == expected


def test_action_digest_equals_digest_of_canonical_envelope() -> None:
    envelope = canonical.dumps({"plan": PLAN, "actionType": "run.create"})
    assert digests.PLAIN.action_digest("run.create", PLAN) == digests.digest(
        digests.ACTION_TAG, envelope
    )


def test_action_digest_binds_the_action_type() -> None:
    assert digests.PLAIN.action_digest("run.create", PLAN) != digests.PLAIN.action_digest(
        "tool.invoke", PLAN
    )


def test_plan_digest_known_answer() -> None:
    expected = hashlib.sha256(b"qinglong/action-plan@v1\x00" + PLAN_BYTES).hexdigest()
    assert digests.PLAIN.plan_digest(PLAN) == expected
    assert digests.PLAIN.plan_digest(PLAN) != digests.PLAIN.action_digest("run.create", PLAN)


def test_evidence_digest_known_answer() -> None:
    fields = {"runId": "r1", "dispatchId": "d1", "acceptedAtMs": 1_700_000_000_000}
    data = b'{"acceptedAtMs":1700000000000,"dispatchId":"d1","runId":"r1"}'
    expected = hashlib.sha256(b"qinglong/approved-run-receipt@v1\x00" + data).hexdigest()
    assert digests.evidence_digest(digests.RUN_RECEIPT_TAG, fields) == expected


def test_plan_cap_applies_to_the_plan_not_the_envelope() -> None:
    at_cap = {"x": "y" * (canonical.PLAN_MAX_BYTES - len(b'{"x":""}'))}
    assert len(canonical.dumps(at_cap)) == canonical.PLAN_MAX_BYTES
    digests.PLAIN.action_digest("run.create", at_cap)
    over = {"x": "y" * (canonical.PLAN_MAX_BYTES - len(b'{"x":""}') + 1)}
    with pytest.raises(errors.CanonicalJsonError, match="larger than"):
        digests.PLAIN.action_digest("run.create", over)


def test_bad_values_raise_canonical_error() -> None:
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.plan\.p: floats"):
        digests.PLAIN.action_digest("run.create", {"p": 0.5})
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.actionType: must be a string"):
        digests.PLAIN.action_digest(7, {})  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.plan: must be an object"):
        digests.PLAIN.action_digest("run.create", [1])  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.a: object keys must be strings"):
        digests.PLAIN.plan_digest({"a": {1: 2}})
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.n: integer outside"):
        digests.evidence_digest(digests.RUN_RECEIPT_TAG, {"n": 2**60})


@pytest.mark.parametrize(
    "tag", ["", "qinglong/x", "other/x@v1", "qinglong/x@v1\x00", "qinglong/@v1"]
)
def test_malformed_tag_is_refused(tag: str) -> None:
    with pytest.raises(errors.InvalidInput, match="digest tag"):
        digests.digest(tag, b"{}")


@settings(max_examples=100)
@given(
    plan=st.dictionaries(
        st.text(max_size=6), st.integers(-100, 100) | st.text(max_size=6) | st.none(), max_size=6
    )
)
def test_action_digest_matches_hashlib(plan: dict[str, object]) -> None:
    envelope = canonical.dumps({"actionType": "run.create", "plan": plan})
    expected = hashlib.sha256(b"qinglong/approved-action@v1\0" + envelope).hexdigest()
    assert digests.PLAIN.action_digest("run.create", plan) == expected


# -- plan digests keyed with a secret ------------------------------------------------------

SECRET = bytes(range(32))


def test_a_keyed_plan_digest_is_hmac_sha256_in_the_same_domain() -> None:
    import hmac

    keyed = digests.keyed(SECRET)
    envelope = b'{"actionType":"run.create","plan":' + PLAN_BYTES + b"}"
    expected = hmac.new(
        SECRET, b"qinglong/approved-action@v1\x00" + envelope, hashlib.sha256
    ).hexdigest()
    assert keyed.action_digest("run.create", PLAN) == expected
    assert (
        keyed.plan_digest(PLAN)
        == hmac.new(SECRET, b"qinglong/action-plan@v1\x00" + PLAN_BYTES, hashlib.sha256).hexdigest()
    )
    assert digests.PLAIN.action_digest("run.create", PLAN) == (
        hashlib.sha256(b"qinglong/approved-action@v1\x00" + envelope).hexdigest()
    )
    assert keyed.keyed
    assert not digests.PLAIN.keyed
    assert repr(keyed) == "PlanDigests()"  # the secret stays out of reprs and tracebacks


def test_bound_accepts_the_keyed_digest_or_a_plain_one_from_before_the_key() -> None:
    keyed = digests.keyed(SECRET)
    own = keyed.action_digest_of_canonical("run.create", PLAN_BYTES)
    plain = digests.PLAIN.action_digest_of_canonical("run.create", PLAN_BYTES)
    assert keyed.bound("run.create", PLAN_BYTES, own) == own
    assert keyed.bound("run.create", PLAN_BYTES, plain) == plain
    other = "f" * 64
    assert keyed.bound("run.create", PLAN_BYTES, other) == own  # drift: the caller sees it
    # Without a key there is nothing to fall back from: a keyed digest binds nothing here.
    assert digests.PLAIN.bound("run.create", PLAN_BYTES, own) == plain
    assert keyed.binds_plan(PLAN_BYTES, keyed.plan_digest(PLAN))
    assert keyed.binds_plan(PLAN_BYTES, digests.PLAIN.plan_digest(PLAN))
    assert not digests.PLAIN.binds_plan(PLAN_BYTES, keyed.plan_digest(PLAN))
    assert not keyed.binds_plan(PLAN_BYTES + b" ", keyed.plan_digest(PLAN))


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(errors.InvalidInput):
        digests.keyed(b"short")
