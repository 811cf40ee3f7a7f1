"""The SQLite dialect's named statements, loaded once from this folder's files by area.

The PostgreSQL store has the same names in files of the same names. Every statement is
parameterised; committed_at_ms columns use the database clock.
"""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.adapters import named_sql

Q = named_sql.load_folder(Path(__file__).parent)
"""Statement text by name; the PostgreSQL store has the same names."""
