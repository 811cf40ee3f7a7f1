"""W3C trace context (`traceparent`): the one trace a dispatch belongs to, as text.

Pure: a caller's header is checked here, stored with the approval and its dispatch, and
handed to the effects (`http.request`'s header, `command.run`'s `TRACEPARENT`). It names a
trace, never a secret; the database checks the same shape (migration 0039).
"""

from __future__ import annotations

import re

from qinglong_dispatcher.domain import errors

TRACEPARENT_LENGTH = 55
"""`00-` + 32 hex + `-` + 16 hex + `-` + 2 hex: the only form stored (version 00)."""

_HEX = re.compile(r"[0-9a-f]+")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


class InvalidTraceparent(errors.InvalidInput):
    """traceparent: not a W3C trace context (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>)"""

    code = "traceparent_invalid"


def _hex(text: str, length: int) -> bool:
    return len(text) == length and _HEX.fullmatch(text) is not None


def parse_traceparent(value: str) -> str:
    """The stored form of a caller's `traceparent`, or `InvalidTraceparent`.

    Lowercase hex only, trace and span ids not all zero, version `ff` refused. A later
    version's extra fields are dropped (the W3C rule for a version-00 reader) and the value
    is kept as version 00, the one form every later reader understands."""
    if not isinstance(value, str) or len(value) < TRACEPARENT_LENGTH or len(value) > 512:
        raise InvalidTraceparent()
    version, trace_id, span_id, flags = (
        value[0:2],
        value[3:35],
        value[36:52],
        value[53:55],
    )
    separators = (value[2], value[35], value[52])
    if separators != ("-", "-", "-") or not _hex(version, 2) or version == "ff":
        raise InvalidTraceparent()
    if version == "00" and len(value) != TRACEPARENT_LENGTH:
        raise InvalidTraceparent()
    if len(value) > TRACEPARENT_LENGTH and value[TRACEPARENT_LENGTH] != "-":
        raise InvalidTraceparent()
    if not (_hex(trace_id, 32) and _hex(span_id, 16) and _hex(flags, 2)):
        raise InvalidTraceparent()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        raise InvalidTraceparent()
    return f"00-{trace_id}-{span_id}-{flags}"


def optional_traceparent(value: str | None) -> str | None:
    """`parse_traceparent` for an optional value (None or empty: no trace)."""
    if value is None or value == "":
        return None
    return parse_traceparent(value)


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id of a stored traceparent, or None."""
    return None if traceparent is None else traceparent[3:35]
