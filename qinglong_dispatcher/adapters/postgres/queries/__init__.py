"""The PostgreSQL dialect's named statements, loaded once and bound positionally for asyncpg.

The files of this folder, with the `postgres.sql` the built-in actions lend the store
(`named_sql.load_dialect`), have the SQLite ones' names and blocks. The blocks keep SQLite's
`:name` parameters so the two dialects read alike; each block is compiled once into `$n` text
plus the order of its names, and the call site passes the same mapping the SQLite adapter
passes. Every table is schema-qualified so search_path never decides what a statement
touches; committed_at_ms columns use the database clock (transaction_timestamp(): one instant
per transaction). A locking read splices the plain one and adds its clause (`claim_due_rows`,
`lock_execution`), so one text serves the locked and the read-only path.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from pathlib import Path

from qinglong_dispatcher.adapters import named_sql

# `:name` but not the `::type` of a cast (the first colon of `::` follows a word character).
_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@dataclasses.dataclass(frozen=True, slots=True)
class Statement:
    """A block compiled to asyncpg's `$n` placeholders."""

    text: str
    names: tuple[str, ...]

    def args(self, params: Mapping[str, object]) -> list[object]:
        """The positional arguments, in `$n` order; a missing name is a programming error."""
        return [params[name] for name in self.names]


def compile_block(sql: str) -> Statement:
    """Replace each distinct `:name` with `$n`, numbering names by first appearance."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return Statement(_PARAMETER.sub(number, sql), tuple(names))


@functools.cache
def load(actions: tuple[Path, ...]) -> Mapping[str, Statement]:
    """Compiled statements by name, this folder's and `actions'` (the SQLite store's names)."""
    blocks = named_sql.load_dialect(Path(__file__).parent, "postgres", actions)
    return {name: compile_block(sql) for name, sql in blocks.items()}
