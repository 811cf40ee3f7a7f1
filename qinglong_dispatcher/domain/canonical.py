"""Canonical JSON: the one byte form that plans, commands, barriers and evidence are hashed in."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import errors

PLAN_MAX_BYTES: Final = 64 * 1024
"""Size cap of a plan or command, in canonical bytes."""

BARRIER_MAX_BYTES: Final = 16 * 1024
"""Size cap of a start barrier, in canonical bytes."""

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Largest integer magnitude allowed: every JSON reader represents it exactly."""

MAX_DEPTH: Final = 32
"""Deepest allowed nesting of objects and arrays (the top-level container is depth 1)."""

# Keys shown verbatim in error paths; anything else is shown as ["?"] so that
# an error message never carries data from the input.
_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# A JSON string token or one structural bracket; used to bound nesting before
# the recursive parser sees the text.
_DEPTH_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class _Rejected:
    """A parse result that stands in for a value `loads` refuses, so the walk can name its path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


_FLOAT = _Rejected("floats are not allowed")
_NON_FINITE = _Rejected("NaN and Infinity are not allowed")
_INT_OUT_OF_RANGE = _Rejected(f"integer outside ±{MAX_SAFE_INTEGER}")
_DUPLICATE_KEY = _Rejected("duplicate object key")


def _fail(path: str, reason: str) -> errors.CanonicalJsonError:
    return errors.CanonicalJsonError(f"{path}: {reason}")


def _key_path(path: str, key: str) -> str:
    if _SIMPLE_KEY.fullmatch(key):
        return f"{path}.{key}"
    return f'{path}["?"]'


def _encode_str(value: str, path: str) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise _fail(path, "string is not valid Unicode (lone surrogate)") from None


class _Encoder:
    """One walk that validates and writes canonical bytes, stopping as soon as the cap is passed."""

    def __init__(self, max_bytes: int) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.max_bytes = max_bytes

    def emit(self, chunk: bytes, path: str) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise _fail(path, f"canonical JSON is larger than {self.max_bytes} bytes")
        self.parts.append(chunk)

    def room(self) -> int:
        return self.max_bytes - self.size

    def value(self, value: object, path: str, depth: int) -> None:
        if value is None:
            self.emit(b"null", path)
        elif value is True:
            self.emit(b"true", path)
        elif value is False:
            self.emit(b"false", path)
        elif isinstance(value, int):
            # int.__int__ turns an IntEnum (or any int subclass) into a plain int.
            number = int.__int__(value)
            if not -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
                raise _fail(path, _INT_OUT_OF_RANGE.reason)
            self.emit(str(number).encode("ascii"), path)
        elif isinstance(value, str):
            if len(value) > self.room():  # every character takes at least one byte
                raise _fail(path, f"canonical JSON is larger than {self.max_bytes} bytes")
            # str.__str__ yields the underlying text even where __str__ is overridden
            # (a `(str, Enum)` member would otherwise print as `Cls.NAME`).
            self.emit(_encode_str(str.__str__(value), path), path)
        elif isinstance(value, float):
            raise _fail(path, _FLOAT.reason)
        elif isinstance(value, _Rejected):
            raise _fail(path, value.reason)
        elif isinstance(value, list):
            self.array(value, path, depth + 1)
        elif isinstance(value, Mapping):
            self.object(value, path, depth + 1)
        else:
            raise _fail(path, f"unsupported type {type(value).__name__}")

    def array(self, items: list[object], path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _fail(path, f"nesting deeper than {MAX_DEPTH}")
        if 2 * len(items) + 1 > self.room():  # `[` `]`, one byte per item, commas
            raise _fail(path, f"canonical JSON is larger than {self.max_bytes} bytes")
        self.emit(b"[", path)
        for index, item in enumerate(items):
            if index:
                self.emit(b",", path)
            self.value(item, f"{path}[{index}]", depth)
        self.emit(b"]", path)

    def object(self, mapping: Mapping[object, object], path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _fail(path, f"nesting deeper than {MAX_DEPTH}")
        if 5 * len(mapping) + 1 > self.room():  # `{` `}`, `"":0` per member, commas
            raise _fail(path, f"canonical JSON is larger than {self.max_bytes} bytes")
        members: dict[str, object] = {}
        for key, item in mapping.items():
            if not isinstance(key, str):
                raise _fail(path, "object keys must be strings")
            plain = str.__str__(key)
            if plain in members:
                raise _fail(path, _DUPLICATE_KEY.reason)
            members[plain] = item
        self.emit(b"{", path)
        # Python orders str by code point, which is the order canonical JSON fixes.
        for index, key in enumerate(sorted(members)):
            child = _key_path(path, key)
            if index:
                self.emit(b",", path)
            self.emit(_encode_str(key, child), child)
            self.emit(b":", child)
            self.value(members[key], child, depth)
        self.emit(b"}", path)


def _plain(value: object, depth: int) -> bool:
    """Whether `value` is made only of exact plain types within the rules (the fast path).

    Anything else (a float, an enum, a key that is not a str, an int out of range, too
    deep) sends `dumps`/`loads` down the slow walk, which names the offending path.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER  # type: ignore[operator]
    if depth >= MAX_DEPTH:
        return False
    if kind is dict:
        return all(
            type(k) is str and _plain(v, depth + 1)
            for k, v in value.items()  # type: ignore[attr-defined]
        )
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)  # type: ignore[attr-defined]
    return False


def _fast_dumps(value: object, max_bytes: int) -> bytes | None:
    """The stdlib encoder, once `_plain` vouched for the value: same bytes, far fewer calls."""
    if not _plain(value, 0):
        return None
    try:
        data = json.dumps(
            value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        ).encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate: the walk reports where
    return data if len(data) <= max_bytes else None


def dumps(value: object, *, max_bytes: int = PLAN_MAX_BYTES, root: str = "$") -> bytes:
    """Write `value` as canonical JSON bytes.

    Accepts dict/Mapping with str keys, list, str, bool, None and int within
    ±MAX_SAFE_INTEGER (int and str subclasses, such as enums, are written as their
    plain value). Anything else, a lone surrogate, nesting deeper than MAX_DEPTH or
    output over `max_bytes` raises `CanonicalJsonError` naming the JSON path
    (`root` is the name of the top, e.g. `$.plan`) and never the value.
    """
    fast = _fast_dumps(value, max_bytes)
    if fast is not None:
        return fast
    encoder = _Encoder(max_bytes)
    encoder.value(value, root, 0)
    return b"".join(encoder.parts)


def _parse_int(text: str) -> int | _Rejected:
    # Bounding the length first keeps int() off megabyte-long digit strings.
    if len(text) > len(str(-MAX_SAFE_INTEGER)):
        return _INT_OUT_OF_RANGE
    return int(text)


def _parse_float(_text: str) -> _Rejected:
    return _FLOAT


def _parse_constant(_text: str) -> _Rejected:
    return _NON_FINITE


def _parse_object(pairs: list[tuple[str, object]]) -> dict[str, object] | _Rejected:
    members = dict(pairs)
    if len(members) != len(pairs):
        return _DUPLICATE_KEY
    return members


def _check_depth(text: str) -> None:
    depth = 0
    for match in _DEPTH_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise _fail("$", f"nesting deeper than {MAX_DEPTH}")
        elif token in ("]", "}"):
            depth -= 1


def loads(data: bytes | str, *, max_bytes: int = PLAN_MAX_BYTES) -> object:
    """Parse strict JSON: the inverse of `dumps`, though the input need not be canonical.

    Refuses invalid UTF-8, input over `max_bytes`, floats and exponents, NaN and
    Infinity, duplicate keys, integers outside ±MAX_SAFE_INTEGER, lone surrogates
    and nesting deeper than MAX_DEPTH. Raises only `CanonicalJsonError`.
    """
    if isinstance(data, bytes | bytearray):
        if len(data) > max_bytes:
            raise _fail("$", f"input is larger than {max_bytes} bytes")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise _fail("$", "input is not valid UTF-8") from None
    elif isinstance(data, str):
        if len(data) > max_bytes:
            raise _fail("$", f"input is larger than {max_bytes} bytes")
        try:
            size = len(data.encode("utf-8"))
        except UnicodeEncodeError:
            raise _fail("$", "input is not valid Unicode (lone surrogate)") from None
        if size > max_bytes:
            raise _fail("$", f"input is larger than {max_bytes} bytes")
        text = data
    else:
        raise _fail("$", f"expected bytes or str, not {type(data).__name__}")
    if text.count("[") + text.count("{") > MAX_DEPTH:  # only then can nesting be too deep
        _check_depth(text)
    try:
        parsed: object = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=_parse_object,
        )
    except json.JSONDecodeError as exc:
        # exc.msg describes the syntax error without quoting the input.
        raise _fail("$", f"not valid JSON ({exc.msg} at character {exc.pos})") from None
    except (ValueError, RecursionError):
        raise _fail("$", "not valid JSON") from None
    # The walk turns stand-ins into errors with their path and checks strings and ints;
    # canonical output is never longer than the input, so the cap cannot trip here.
    # A `\u` escape may spell a lone surrogate, which only the walk checks.
    if "\\u" in text or not _plain(parsed, 0):
        _Encoder(max_bytes).value(parsed, "$", 0)
    return parsed


def is_canonical(data: bytes, *, max_bytes: int = PLAN_MAX_BYTES) -> bool:
    """Whether `data` is exactly the canonical JSON of the value it holds."""
    try:
        return dumps(loads(data, max_bytes=max_bytes), max_bytes=max_bytes) == data
    except errors.CanonicalJsonError:
        return False
