"""The SQLite dialect's named statements, loaded once from this folder's files by area and
the built-in actions' own `queries/sqlite.sql` (`named_sql.load_dialect`).

The PostgreSQL store has the same names in files of the same names. Every statement is
parameterised; committed_at_ms columns use the database clock.
"""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.adapters import named_sql

Q = named_sql.load_dialect(Path(__file__).parent, "sqlite")
"""Statement text by name; the PostgreSQL store has the same names."""
