"""Both dialects name the same statements, and PostgreSQL binds only what SQLite is given."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from qinglong_dispatcher.adapters import named_sql
from qinglong_dispatcher.adapters.postgres import queries as postgres_queries
from qinglong_dispatcher.adapters.sqlite import queries as sqlite_queries
from tests.support import stores

_FUNCTIONS = {
    "transaction_timestamp",
    "clock_timestamp",
    "unnest",
    "jsonb_to_recordset",
}  # functions in FROM
_SQLITE_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def _sqlite_blocks() -> Mapping[str, str]:
    return sqlite_queries.load(stores.TABLES.statements)


POSTGRES_BLOCKS = named_sql.load_dialect(
    Path(postgres_queries.__file__).parent, "postgres", stores.TABLES.statements
)
POSTGRES_Q = postgres_queries.load(stores.TABLES.statements)


def test_both_dialects_have_the_same_block_names() -> None:
    sqlite_names = set(_sqlite_blocks())
    postgres_names = set(POSTGRES_BLOCKS)
    assert sqlite_names - postgres_names == set(), "blocks missing on PostgreSQL"
    assert postgres_names - sqlite_names == set(), "blocks missing on SQLite"


ONE_STATEMENT_PATHS = {"create_run_fast"}
"""PostgreSQL writes the whole run.create effect in one data-modifying CTE; SQLite has none,
so its block of that name is a stub that nothing runs (it binds none of those names)."""


POSTGRES_ONLY_PARAMETERS = {"proof"}
"""The lease proof: PostgreSQL's trigger checks it against other logins of the server; on an
edge device the OS user owning the file is the authority and SQLite stores no proof. Every
call site of a fenced write passes it (`ids.lease_proof`)."""


@pytest.mark.parametrize("name", sorted(set(POSTGRES_BLOCKS) - ONE_STATEMENT_PATHS))
def test_postgres_parameters_are_a_subset_of_the_sqlite_ones(name: str) -> None:
    # The call sites pass the SQLite mapping: a name only PostgreSQL wants would be missing.
    sqlite_names = set(_SQLITE_PARAMETER.findall(_sqlite_blocks().get(name, "")))
    assert set(POSTGRES_Q[name].names) - POSTGRES_ONLY_PARAMETERS <= sqlite_names


def test_placeholders_are_numbered_once_per_name_and_casts_survive() -> None:
    statement = postgres_queries.compile_block("SELECT :a::bigint, :b, :a WHERE y::text = :b")
    assert statement.names == ("a", "b")
    assert statement.text.startswith("SELECT $1::bigint, $2, $1")
    assert statement.args({"a": 1, "b": "x", "unused": 3}) == [1, "x"]


def test_every_postgres_table_is_schema_qualified() -> None:
    for name, sql in POSTGRES_BLOCKS.items():
        ctes = set(re.findall(r"(?:WITH|,)\s*([a-z_]+)\s+AS\s*\(", sql))
        for table in re.findall(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+([a-z_.]+)", sql):
            if table not in _FUNCTIONS and table not in ctes:
                assert table.startswith("qinglong."), f"{name}: {table}"
