"""The cluster store: PostgreSQL via asyncpg, schema `qinglong`, `FOR UPDATE SKIP LOCKED`."""
