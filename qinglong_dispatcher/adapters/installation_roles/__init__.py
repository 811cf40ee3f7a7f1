"""An installation's roles on the PostgreSQL server, beside the store: which existing roles it
may take as its own (`claims`), making and claiming its kind roles (`kinds`, for `migrate`),
a principal's role (`principal`, for `token create` and `token revoke`) and an approver
group's role (`group`, for `token create --group`).

Roles are server-wide and made by DDL, which takes no parameters: no store transaction and no
named statement runs here. Each function runs on the connection of the caller's session or
transaction; nothing here imports the store.
"""

from __future__ import annotations

from typing import Any

Connection = Any
"""An `asyncpg.Connection` (the store's `database.Connection`): asyncpg ships no types."""
