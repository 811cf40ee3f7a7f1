"""The edge profile's dialect: the SQLite store, the file's daemon lock and its online backup."""

from __future__ import annotations

from qinglong_dispatcher.adapters.edge.dialect import SqliteDialect

__all__ = ["SqliteDialect"]
