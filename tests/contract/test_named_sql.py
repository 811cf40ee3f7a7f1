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


POSTGRES_ONLY_PARAMETERS = {"proof", "rows"}
"""The lease proof: PostgreSQL's trigger checks it against other logins of the server; on an
edge device the OS user owning the file is the authority and SQLite stores no proof. Every
call site of a fenced write passes it (`ids.lease_proof`). And `rows`: a page that
`Query.run_rows` binds as one JSON array on PostgreSQL, and row by row on SQLite, each row's
own names (`test_a_page_of_rows_binds_on_sqlite_what_postgres_reads_of_it`)."""


@pytest.mark.parametrize("name", sorted(set(POSTGRES_BLOCKS) - ONE_STATEMENT_PATHS))
def test_postgres_parameters_are_a_subset_of_the_sqlite_ones(name: str) -> None:
    # The call sites pass the SQLite mapping: a name only PostgreSQL wants would be missing.
    sqlite_names = set(_SQLITE_PARAMETER.findall(_sqlite_blocks().get(name, "")))
    assert set(POSTGRES_Q[name].names) - POSTGRES_ONLY_PARAMETERS <= sqlite_names


_RECORDSET_COLUMNS = re.compile(r"jsonb_to_recordset\(:rows::jsonb\)\s+AS\s+\w+\s*\(([^)]*)\)")


@pytest.mark.parametrize(
    "name", sorted(name for name, sql in POSTGRES_BLOCKS.items() if ":rows::jsonb" in sql)
)
def test_a_page_of_rows_binds_on_sqlite_what_postgres_reads_of_it(name: str) -> None:
    # One mapping per row serves both: each column PostgreSQL reads from the array is a name
    # the SQLite statement binds (the proof aside, which SQLite never stores).
    found = _RECORDSET_COLUMNS.search(POSTGRES_BLOCKS[name])
    assert found is not None, f"{name}: the page is read with jsonb_to_recordset"
    columns = {column.split()[0] for column in found.group(1).split(",")}
    sqlite_names = set(_SQLITE_PARAMETER.findall(_sqlite_blocks()[name]))
    assert columns - {"lease_proof"} <= sqlite_names
    assert "rows" not in sqlite_names


def test_placeholders_are_numbered_once_per_name_and_casts_survive() -> None:
    statement = postgres_queries.compile_block("SELECT :a::bigint, :b, :a WHERE y::text = :b")
    assert statement.names == ("a", "b")
    assert statement.text.startswith("SELECT $1::bigint, $2, $1")
    assert statement.args({"a": 1, "b": "x", "unused": 3}) == [1, "x"]


def test_every_postgres_table_is_schema_qualified() -> None:
    for name, sql in POSTGRES_BLOCKS.items():
        ctes = set(re.findall(r"(?:WITH(?: RECURSIVE)?|,)\s*([a-z_]+)\s+AS\s*\(", sql))
        for table in re.findall(r"\b(?:FROM|JOIN|INTO|UPDATE)\s+([a-z_.]+)", sql):
            if table not in _FUNCTIONS and table not in ctes:
                # The system catalogs are qualified too (`pg_catalog.pg_auth_members`).
                assert table.startswith(("qinglong.", "pg_catalog.")), f"{name}: {table}"


_SESSION_STATE = {
    "a SET without LOCAL": re.compile(r"(?:^|;)\s*SET\s+(?!LOCAL\b)", re.IGNORECASE),
    "a session-wide set_config": re.compile(r"set_config\s*\([^;]*?,\s*false\s*\)", re.IGNORECASE),
    "a session advisory lock": re.compile(r"pg_advisory_(?:lock|try_lock)", re.IGNORECASE),
    "a LISTEN": re.compile(r"\bLISTEN\b", re.IGNORECASE),
    "a cursor WITH HOLD": re.compile(r"\bWITH\s+HOLD\b", re.IGNORECASE),
    "a temporary object": re.compile(r"\bCREATE\s+(?:TEMP|TEMPORARY)\b", re.IGNORECASE),
}
"""What would outlive a transaction on its pooled session (the pool does not reset it)."""


@pytest.mark.parametrize("name", sorted(POSTGRES_BLOCKS))
def test_no_postgres_statement_leaves_state_on_its_pooled_session(name: str) -> None:
    sql = POSTGRES_BLOCKS[name]
    for what, pattern in _SESSION_STATE.items():
        assert not pattern.search(sql), f"{name}: {what}"


def test_the_session_state_check_sees_what_it_looks_for() -> None:
    leaks = [
        "SET statement_timeout = 0",
        "SELECT 1; set role x",
        "SELECT set_config('lock_timeout', :t, false)",
        "SELECT pg_advisory_lock(1)",
        "LISTEN due",
        "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
        "CREATE TEMP TABLE t (x int)",
    ]
    for sql in leaks:
        assert any(p.search(sql) for p in _SESSION_STATE.values()), sql
    for sql in (
        "SET LOCAL ROLE x",
        "UPDATE qinglong.t SET a = 1",
        "SELECT set_config('lock_timeout', :t, true)",
        "SELECT pg_advisory_xact_lock(1)",
    ):
        assert not any(p.search(sql) for p in _SESSION_STATE.values()), sql
