"""docs/schema/<dialect>.sql is what a fresh migration of the whole chain leaves, exactly."""

from __future__ import annotations

import difflib

import pytest

from tests.support import schema_reference, stores


def _diff(committed: str, fresh: str, name: str) -> str:
    lines = difflib.unified_diff(
        committed.splitlines(), fresh.splitlines(), f"{name} (committed)", f"{name} (fresh)",
        lineterm="", n=1,
    )  # fmt: skip
    return "\n".join(list(lines)[:60])


@pytest.mark.parametrize("dialect", stores.DIALECTS)
async def test_the_reference_schema_is_what_a_fresh_migration_leaves(dialect: str) -> None:
    if dialect == "postgres":
        await stores.require_server()
    path = schema_reference.FILES[dialect]
    committed = path.read_text(encoding="utf-8")
    fresh = await schema_reference.reference(dialect)
    name = str(path.relative_to(schema_reference.ROOT))
    assert fresh == committed, (
        f"{name} is not what the migrations make; if the migrations are right, run "
        f"`{schema_reference.REGENERATE}` and commit it:\n{_diff(committed, fresh, name)}"
    )
    # Nothing of the database or installation a run made for itself reaches the file.
    assert "qlt_" not in fresh
