"""A named SQLite block may hold a few statements that take the same rows (`Query.run_rows`):
it is split where SQLite itself says a statement is complete, never at a semicolon inside a
string or a comment, and only a block that `run_rows` takes holds more than one."""

from __future__ import annotations

import re
from pathlib import Path

import qinglong_dispatcher
from qinglong_dispatcher.adapters.sqlite import database
from tests.contract.test_named_sql import _sqlite_blocks


def test_a_block_splits_where_sqlite_says_a_statement_ends() -> None:
    block = "-- a comment; not an end\nINSERT INTO a VALUES (';');\nINSERT INTO b\nVALUES (1)"
    assert database.statements_of(block) == (
        "-- a comment; not an end\nINSERT INTO a VALUES (';');",
        "INSERT INTO b\nVALUES (1)",
    )
    assert database.statements_of("SELECT 1") == ("SELECT 1",)


def test_only_blocks_taken_by_run_rows_hold_several_statements() -> None:
    # `one`, `all`, `run` and `run_many` execute one statement: a block of several taken by
    # any of them would fail on SQLite alone.
    package = Path(qinglong_dispatcher.__file__).parent
    taken = {
        name
        for source in package.rglob("*.py")
        for name in re.findall(r'run_rows\(\s*"([a-z_]+)"', source.read_text(encoding="utf-8"))
    }
    several = {
        name for name, block in _sqlite_blocks().items() if len(database.statements_of(block)) > 1
    }
    assert several, "a block of several statements exists (a page's Runs)"
    assert several <= taken
