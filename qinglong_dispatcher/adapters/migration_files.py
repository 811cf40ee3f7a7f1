"""Reads the numbered, checksummed migration files of a dialect."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from qinglong_dispatcher import resources
from qinglong_dispatcher.domain import errors, schema

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_AMENDS = re.compile(r"^-- amends checksum ([0-9a-f]{64})$", re.MULTILINE)


def load(dialect: Literal["sqlite", "postgres"]) -> tuple[schema.Migration, ...]:
    """Every migration of a dialect, in order; numbers must be contiguous from 1."""
    found: list[schema.Migration] = []
    for path in sorted(resources.migrations_dir(dialect).glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise errors.SchemaError(f"migration file name not understood: {path.name}")
        sql = path.read_text(encoding="utf-8")
        found.append(
            schema.Migration(
                version=int(match.group(1)),
                name=match.group(2),
                sql=sql,
                checksum=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
                amends=frozenset(_AMENDS.findall(sql)),
            )
        )
    numbers = [m.version for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise errors.SchemaError(f"migration numbers are not contiguous from 0001: {numbers}")
    return tuple(found)
