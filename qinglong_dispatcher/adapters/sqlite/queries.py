"""The SQLite dialect's named statements, loaded once."""

from __future__ import annotations

from pathlib import Path

from qinglong_dispatcher.adapters import named_sql

Q = named_sql.load(Path(__file__).with_name("queries.sql"))
"""Statement text by name; the PostgreSQL store has the same names."""
