"""Which PostgreSQL path an operation took: a one-statement fast path or a shared transaction.

The contract suite checks what either path writes; a spy on the store's `Database` tells the
tests which one ran, so neither can silently stop being exercised.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong_dispatcher import ports
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


def spy(
    pg: stores.Harness, monkeypatch: pytest.MonkeyPatch, *, store: ports.Store | None = None
) -> Paths:
    """Record every `statement` (one that raised wrote nothing: False) and `transaction` of
    the database of `store` (default: the runtime store)."""
    from qinglong_dispatcher.adapters.postgres import store as postgres_store

    spied = pg.store if store is None else store
    assert isinstance(spied, postgres_store.PostgresStore)
    seen = Paths()
    db = spied.db
    statement, transaction = db.statement, db.transaction

    async def spy_statement(*args: Any, **kwargs: Any) -> Any:
        try:
            row = await statement(*args, **kwargs)
        except Exception:
            seen.statements.append(False)
            raise
        seen.statements.append(row is not None)
        return row

    async def spy_transaction(*args: Any, **kwargs: Any) -> Any:
        seen.transactions += 1
        return await transaction(*args, **kwargs)

    monkeypatch.setattr(db, "statement", spy_statement)
    monkeypatch.setattr(db, "transaction", spy_transaction)
    return seen
