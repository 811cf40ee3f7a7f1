"""The edge store: one SQLite file, one connection, `BEGIN IMMEDIATE` short transactions."""

from __future__ import annotations

from qinglong_dispatcher.adapters.sqlite.dialect import SqliteDialect

__all__ = ["SqliteDialect"]
