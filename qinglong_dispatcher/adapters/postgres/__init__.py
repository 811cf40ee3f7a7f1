"""The cluster store: PostgreSQL via asyncpg, schema `qinglong`, `FOR UPDATE SKIP LOCKED`."""

from __future__ import annotations

from qinglong_dispatcher.adapters.postgres.dialect import PostgresDialect

__all__ = ["PostgresDialect"]
