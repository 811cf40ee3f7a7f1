"""The SQLite dialect's named statements, loaded once from this folder's files by area and
the `queries/sqlite.sql` of each folder the built-in actions lend the store
(`named_sql.load_dialect`).

The PostgreSQL store has the same names in files of the same names. Every statement is
parameterised; committed_at_ms columns use the database clock.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

from qinglong_dispatcher.adapters import named_sql


@functools.cache
def load(actions: tuple[Path, ...]) -> Mapping[str, str]:
    """Statement text by name, this folder's and `actions'` (the PostgreSQL store's names)."""
    return named_sql.load_dialect(Path(__file__).parent, "sqlite", actions)
