"""Which PostgreSQL path an operation took: a one-statement fast path or a shared transaction.

The contract suite checks what either path writes; a spy on the store's `Database` tells the
tests which one ran, so neither can silently stop being exercised.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.support import stores


@dataclasses.dataclass
class Paths:
    """What each operation did: one-statement results (wrote a row or not), transactions."""

    statements: list[bool] = dataclasses.field(default_factory=list)
    transactions: int = 0

    def clear(self) -> None:
        """Forget what set-up did."""
        self.statements.clear()
        self.transactions = 0

    @property
    def seen(self) -> tuple[list[bool], int]:
        """(one-statement results, shared transactions) since the last `clear`."""
        return (list(self.statements), self.transactions)


def spy(pg: stores.Harness, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """Record every `statement` and `transaction` of the runtime store's database."""
    from qinglong_dispatcher.adapters.postgres import store as postgres_store

    assert isinstance(pg.store, postgres_store.PostgresStore)
    seen = Paths()
    db = pg.store.db
    statement, transaction = db.statement, db.transaction

    async def spy_statement(*args: Any, **kwargs: Any) -> Any:
        row = await statement(*args, **kwargs)
        seen.statements.append(row is not None)
        return row

    async def spy_transaction(*args: Any, **kwargs: Any) -> Any:
        seen.transactions += 1
        return await transaction(*args, **kwargs)

    monkeypatch.setattr(db, "statement", spy_statement)
    monkeypatch.setattr(db, "transaction", spy_transaction)
    return seen
