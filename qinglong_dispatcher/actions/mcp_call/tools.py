"""A listed tool as `mcp.call` judges it: its schema's digest, its hints, whether arguments fit.

Pure but for `jsonschema` (which the `mcp` extra brings), imported where a check is made. The
schema digest is over the schema's JSON with sorted keys and no whitespace (JSON Schema may
hold fractional numbers, which the dispatcher's canonical JSON refuses), domain-separated like
every digest of the dispatcher: `sha256(b"qinglong/mcp.call/input-schema@v1\\0" + json)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

SCHEMA_TAG: Final = b"qinglong/mcp.call/input-schema@v1\x00"
HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
"""The annotations kept as inspect evidence (booleans or null; never a title or text)."""


def schema_digest(schema: Mapping[str, Any]) -> str:
    """The digest a plan's `inputSchemaDigest` names: what the approver saw of the tool."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(SCHEMA_TAG + text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ListedTool:
    """One tool as the server listed it."""

    name: str
    input_schema: Mapping[str, Any]
    hints: Mapping[str, bool | None]

    @property
    def digest(self) -> str:
        """Its input schema's digest."""
        return schema_digest(self.input_schema)

    def evidence(self) -> dict[str, object]:
        """What inspect records of it: the schema digest and the behaviour hints."""
        return {"inputSchemaDigest": self.digest, **dict(self.hints)}

    def refusal(self, arguments: Mapping[str, Any], approved_digest: str | None) -> str | None:
        """Why these arguments may not be sent to it (a low-sensitivity code), or None."""
        if approved_digest is not None and approved_digest != self.digest:
            return "mcp_schema_drift"
        # The mcp extra brings jsonschema (untyped: pyproject's mypy override).
        from jsonschema import exceptions, validators

        try:
            validator_class = validators.validator_for(self.input_schema)
            validator_class.check_schema(self.input_schema)
            validator = validator_class(self.input_schema)
        except (exceptions.SchemaError, exceptions.UnknownType, TypeError):
            return "mcp_schema_invalid"
        try:
            valid = validator.is_valid(dict(arguments))
        except (exceptions.RefResolutionError, exceptions.UnknownType, RecursionError):
            return "mcp_schema_invalid"
        except Exception:  # a referencing failure of the schema itself, never of a value
            return "mcp_schema_invalid"
        return None if valid else "mcp_arguments_invalid"


def hints_of(annotations: Mapping[str, Any] | None) -> dict[str, bool | None]:
    """The behaviour hints of a tool's annotations, each a boolean or None."""
    given = annotations or {}
    return {name: value if isinstance(value := given.get(name), bool) else None for name in HINTS}
