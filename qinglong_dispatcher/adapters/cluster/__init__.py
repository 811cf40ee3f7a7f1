"""The cluster profile's dialect: the PostgreSQL store and its wake-up listener."""

from __future__ import annotations

from qinglong_dispatcher.adapters.cluster.dialect import PostgresDialect

__all__ = ["PostgresDialect"]
