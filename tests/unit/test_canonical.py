"""Canonical JSON: exact bytes, strict parsing, and nothing but CanonicalJsonError on bad input."""

from __future__ import annotations

import enum
import json
import math
import random
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong_dispatcher.domain import canonical, errors

MAX = canonical.MAX_SAFE_INTEGER

scalars = st.none() | st.booleans() | st.integers(-MAX, MAX) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
# Anything a caller might hand over by mistake, floats and containers of the wrong kind included.
junk_scalars = (
    scalars
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers()
    | st.binary(max_size=8)
    | st.text(alphabet=st.characters(codec=None), max_size=8)  # lone surrogates too
    | st.just(object())
)
junk_values = st.recursive(
    junk_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children)
        | st.frozensets(st.integers(), max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.integers() | st.booleans(), children, max_size=4)
    ),
    max_leaves=15,
)


def _reference(value: object) -> bytes:
    """An independent writer: the stdlib with the same rules spelled as options."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def _reordered(value: object, rnd: random.Random) -> object:
    """The same value with every object's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: _reordered(item, rnd) for key, item in items}
    if isinstance(value, list):
        return [_reordered(item, rnd) for item in value]
    return value


def _error_message(exc: BaseException) -> str:
    assert isinstance(exc, errors.CanonicalJsonError)
    message = str(exc)
    assert "\n" not in message
    assert message.startswith("$")
    return message


# -- dumps -------------------------------------------------------------------------------


def test_dumps_exact_form() -> None:
    value = {"b": [1, -2, True, False, None], "a": {"z": "x", "y": ""}, "c": 'q"\\\n'}
    assert canonical.dumps(value) == (
        b'{"a":{"y":"","z":"x"},"b":[1,-2,true,false,null],"c":"q\\"\\\\\\n"}'
    )


def test_non_ascii_is_kept_as_utf8() -> None:
    assert canonical.dumps("é") == b'"\xc3\xa9"'
    assert canonical.dumps({"名": "😀"}) == '{"名":"😀"}'.encode()


def test_keys_sort_by_code_point_not_utf16() -> None:
    # U+FFFD < U+1F600 by code point; UTF-16 (D83D…) would put the emoji first.
    assert canonical.dumps({"\U0001f600": 1, "\ufffd": 2, "Z": 3, "a": 4}) == (
        '{"Z":3,"a":4,"\ufffd":2,"\U0001f600":1}'.encode()
    )


def test_integer_bounds() -> None:
    assert canonical.dumps([MAX, -MAX]) == b"[9007199254740991,-9007199254740991]"
    for bad in (MAX + 1, -MAX - 1, 10**400):
        with pytest.raises(errors.CanonicalJsonError, match=r"^\$\.n: integer outside"):
            canonical.dumps({"n": bad})


@pytest.mark.parametrize("bad", [1.0, 0.5, math.nan, math.inf, -math.inf])
def test_dumps_rejects_floats_naming_the_path(bad: float) -> None:
    with pytest.raises(errors.CanonicalJsonError) as info:
        canonical.dumps({"plan": {"priority": bad}})
    assert str(info.value) == "$.plan.priority: floats are not allowed"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({True: 1}, "$: object keys must be strings"),
        ({1: 1}, "$: object keys must be strings"),
        ({"a": (1, 2)}, "$.a: unsupported type tuple"),
        ({"a": {1, 2}}, "$.a: unsupported type set"),
        ([b"secret"], "$[0]: unsupported type bytes"),
        ([object()], "$[0]: unsupported type object"),
        ({"s": "ok\ud800"}, "$.s: string is not valid Unicode (lone surrogate)"),
        ({"has space": 1.5}, '$["?"]: floats are not allowed'),
    ],
)
def test_dumps_rejects_and_never_echoes(value: object, message: str) -> None:
    with pytest.raises(errors.CanonicalJsonError) as info:
        canonical.dumps(value)
    assert str(info.value) == message


def test_dumps_rejects_lone_surrogate_key() -> None:
    with pytest.raises(errors.CanonicalJsonError, match="lone surrogate"):
        canonical.dumps({"\udfff": 1})


def test_dumps_size_cap() -> None:
    fits = "x" * (canonical.PLAN_MAX_BYTES - 2)
    assert len(canonical.dumps(fits)) == canonical.PLAN_MAX_BYTES
    with pytest.raises(errors.CanonicalJsonError, match="larger than 65536 bytes"):
        canonical.dumps(fits + "x")
    with pytest.raises(errors.CanonicalJsonError, match="larger than 16384 bytes"):
        canonical.dumps(["y" * 10_000, "y" * 10_000], max_bytes=canonical.BARRIER_MAX_BYTES)
    # Caught before walking: a million members cannot fit.
    with pytest.raises(errors.CanonicalJsonError, match="larger than"):
        canonical.dumps([None] * 1_000_000)


def test_dumps_depth_cap() -> None:
    value: object = []
    for _ in range(canonical.MAX_DEPTH - 1):
        value = [value]
    assert canonical.dumps(value) == b"[" * 32 + b"]" * 32
    with pytest.raises(errors.CanonicalJsonError, match="nesting deeper than 32"):
        canonical.dumps({"a": value})


def test_dumps_rejects_self_reference() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(errors.CanonicalJsonError, match="nesting deeper"):
        canonical.dumps(loop)


def test_enums_and_mappings_write_their_plain_value() -> None:
    # The old mixin on purpose: its str() is "Color.RED", which dumps must not write.
    class Color(str, enum.Enum):  # noqa: UP042 -- the case under test
        RED = "red"

    class Shade(enum.StrEnum):
        DARK = "dark"

    class Level(enum.IntEnum):
        HIGH = 3

    value = OrderedDict([(Color.RED, Level.HIGH), ("b", [Color.RED, Shade.DARK])])
    assert canonical.dumps(value) == b'{"b":["red","dark"],"red":3}'


def test_keys_equal_after_normalisation_are_refused() -> None:
    class Name(str):
        # Identity equality: two equal texts are two dict keys.
        __hash__ = object.__hash__
        __eq__ = object.__eq__

    value = {Name("red"): 1, Name("red"): 2}
    assert len(value) == 2
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$: duplicate object key$"):
        canonical.dumps(value)


@settings(max_examples=150)
@given(value=json_values, rnd=st.randoms(use_true_random=False))
def test_key_order_does_not_change_bytes(value: object, rnd: random.Random) -> None:
    assert canonical.dumps(_reordered(value, rnd)) == canonical.dumps(value)


@settings(max_examples=150)
@given(value=json_values)
def test_round_trip_and_reference(value: object) -> None:
    data = canonical.dumps(value)
    assert data == _reference(value)
    assert canonical.loads(data) == value
    assert canonical.is_canonical(data)


@settings(max_examples=200)
@given(value=junk_values)
def test_dumps_raises_only_canonical_error(value: object) -> None:
    try:
        data = canonical.dumps(value)
    except Exception as exc:
        _error_message(exc)
    else:
        assert canonical.loads(data) == value


# -- loads -------------------------------------------------------------------------------


def test_loads_accepts_non_canonical_spelling() -> None:
    assert canonical.loads(' { "b" : [ 1 , "\\u00e9" ] , "a" : null } ') == {
        "b": [1, "é"],
        "a": None,
    }
    assert not canonical.is_canonical(b'{"b":1,"a":2}')
    assert not canonical.is_canonical(b'"\\u00e9"')
    assert not canonical.is_canonical(b"-0")
    assert canonical.is_canonical(b'{"a":2,"b":1}')


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a":1.0}', "$.a: floats are not allowed"),
        (b'{"a":1e3}', "$.a: floats are not allowed"),
        (b'{"a":1E-3}', "$.a: floats are not allowed"),
        (b'{"a":[NaN]}', "$.a[0]: NaN and Infinity are not allowed"),
        (b"-Infinity", "$: NaN and Infinity are not allowed"),
        (b'{"a":1,"a":2}', "$: duplicate object key"),
        (b'{"x":{"a":1,"a":1}}', "$.x: duplicate object key"),
        (b"[9007199254740992]", "$[0]: integer outside ±9007199254740991"),
        (b"-9007199254740992", "$: integer outside ±9007199254740991"),
        (b"[" + b"9" * 6000 + b"]", "$[0]: integer outside ±9007199254740991"),
        (b'["\\ud800"]', "$[0]: string is not valid Unicode (lone surrogate)"),
        (b"\xff", "$: input is not valid UTF-8"),
        (b'"\xed\xa0\x80"', "$: input is not valid UTF-8"),
        (b"[" * 33 + b"]" * 33, "$: nesting deeper than 32"),
    ],
)
def test_loads_rejects(data: bytes, message: str) -> None:
    with pytest.raises(errors.CanonicalJsonError) as info:
        canonical.loads(data)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "data", [b"", b"[1,", b"{'a':1}", b'{"a":1}x', b'"\x01"', b"\xef\xbb\xbf{}", b"01"]
)
def test_loads_rejects_malformed(data: bytes) -> None:
    with pytest.raises(errors.CanonicalJsonError, match=r"^\$: not valid JSON"):
        canonical.loads(data)


def test_loads_nesting_in_strings_does_not_count() -> None:
    assert canonical.loads(b'["' + b"[" * 100 + b'"]') == ["[" * 100]


def test_loads_deep_nesting_fails_before_recursing() -> None:
    with pytest.raises(errors.CanonicalJsonError, match="nesting deeper"):
        canonical.loads(b"[" * 60_000)


def test_loads_size_cap() -> None:
    data = canonical.dumps("x" * (canonical.BARRIER_MAX_BYTES - 2))
    assert canonical.loads(data, max_bytes=canonical.BARRIER_MAX_BYTES) == "x" * 16382
    with pytest.raises(errors.CanonicalJsonError, match="larger than 16383 bytes"):
        canonical.loads(data, max_bytes=canonical.BARRIER_MAX_BYTES - 1)
    with pytest.raises(errors.CanonicalJsonError, match="larger than"):
        canonical.loads("é" * 40_000)  # 40 000 characters, 80 000 bytes


def test_loads_rejects_str_with_lone_surrogate_and_wrong_types() -> None:
    with pytest.raises(errors.CanonicalJsonError, match="lone surrogate"):
        canonical.loads('"\ud800"')
    with pytest.raises(errors.CanonicalJsonError, match="expected bytes or str"):
        canonical.loads(123)  # type: ignore[arg-type]  # a wrong type on purpose: the runtime check is under test


@settings(max_examples=200)
@given(data=st.binary(max_size=64))
def test_loads_binary_raises_only_canonical_error(data: bytes) -> None:
    try:
        canonical.loads(data)
    except Exception as exc:
        _error_message(exc)


@settings(max_examples=200)
@given(value=junk_values)
def test_loads_of_stdlib_json_raises_only_canonical_error(value: object) -> None:
    # The stdlib writes floats, NaN and huge ints that loads must refuse, not crash on.
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        return
    try:
        canonical.loads(text)
    except Exception as exc:
        _error_message(exc)


@settings(max_examples=200)
@given(json_values)
def test_the_fast_path_writes_exactly_what_the_validating_walk_writes(value: object) -> None:
    walker = canonical._Encoder(canonical.PLAN_MAX_BYTES)
    try:
        walker.value(value, "$", 0)
    except errors.CanonicalJsonError:
        return
    assert canonical.dumps(value) == b"".join(walker.parts)
