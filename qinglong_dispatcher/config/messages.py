"""How a settings validation error reads: one line naming each failing setting as it is set.

Pydantic's messages name a field and a type; a user set a `QINGLONG_*` variable, a TOML key
or a flag, so each error is worded again with that name, the allowed range or choices, and the
value that was given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import get_args

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails


def show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _bounds(field: FieldInfo, kind: str) -> str:
    """Describe a numeric field's range: `must be between 1 and 64`, else the side `kind`
    broke (`must be greater than 0`, `must be at most 3600`)."""
    limits: dict[str, object] = {}
    for item in field.metadata:
        for attr in ("gt", "ge", "lt", "le"):
            if getattr(item, attr, None) is not None:
                limits[attr] = getattr(item, attr)
    if limits.keys() == {"ge", "le"}:
        return f"must be between {limits['ge']} and {limits['le']}"
    side = ("gt", "ge") if kind.startswith("greater") else ("lt", "le")
    words = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}
    return "must be " + " and ".join(f"{words[k]} {v}" for k, v in limits.items() if k in side)


def _describe(
    error: ErrorDetails, fields: Mapping[str, FieldInfo], env_name: Callable[[str], str]
) -> str:
    """One pydantic error as `QINGLONG_NAME: reason (got value)`."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in ("value_error", "assertion_error"):
        reason = str(ctx.get("error", error["msg"]))
    else:
        reason = error["msg"]
    loc = error["loc"]
    if not loc:  # model-level checks already name their setting
        return reason
    name = str(loc[0])
    field = fields.get(name)
    got = f" (got {show(error['input'])})"
    plain = f" (got {error['input']})"  # a number, even when it came in as env text
    if kind == "extra_forbidden":
        reason = "unknown setting"
    elif kind == "missing":
        reason = "required"
    elif field is None:
        pass
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        reason = _bounds(field, kind) + plain
    elif kind == "literal_error":
        choices = [str(c) for c in get_args(field.annotation)]
        listed = " or ".join(choices) if len(choices) == 2 else "one of " + ", ".join(choices)
        reason = f"must be {listed}{got}"
    elif kind == "finite_number":
        reason = "must be a finite number" + plain
    elif kind.startswith("int_"):
        reason = "must be a whole number" + got
    elif kind.startswith("float_"):
        reason = "must be a number" + got
    elif kind.startswith("bool_"):
        reason = "must be true or false" + got
    elif kind in ("string_type", "path_type"):
        reason = "must be a string" + got
    return f"{env_name(name)}: {reason}"


def one_line(
    exc: ValidationError, fields: Mapping[str, FieldInfo], env_name: Callable[[str], str]
) -> str:
    """Every distinct failing setting of `exc`, joined on one line; `fields` are the model's and
    `env_name` names a field as the user sets it."""
    seen: set[object] = set()
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        key = error["loc"][:1]
        # A data-reading default factory is skipped once an earlier field failed; that is
        # a consequence, not a fault of its own.
        if error["type"] == "default_factory_not_called":
            continue
        if key not in seen:
            seen.add(key)
            parts.append(_describe(error, fields, env_name))
    return "; ".join(" ".join(part.split()) for part in parts or [str(exc)])
