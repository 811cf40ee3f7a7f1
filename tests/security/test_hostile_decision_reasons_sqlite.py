"""A comment on an edge file, by a plain `sqlite3` connection (the file's owner may write, so
the table's own check is the rule): a comment kept in an audit row is one printable line of at
most 500 characters, and a row that breaks it is refused with nothing written."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support import stores


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


def _row(comment_sql: str) -> str:
    return (
        "INSERT INTO security_audit_events (kind, actor, principal, project_id, subject_id, "
        f"detail_code, committed_at_ms, comment) VALUES ('recovery.note', 'x', 'op', 'proj-1', "
        f"'d1', 'c', 1, {comment_sql})"
    )


async def test_a_comment_is_one_printable_line_of_at_most_500_characters(
    edge: stores.Harness,
) -> None:
    before = await edge.raw("SELECT * FROM security_audit_events")
    for bad in ("'two' || char(10) || 'lines'", "'tab' || char(9)", "''", "printf('%501s', 'x')"):
        with pytest.raises(Exception, match="CHECK constraint failed"):
            await edge.raw(_row(bad))
    assert await edge.raw("SELECT * FROM security_audit_events") == before
    await edge.raw(_row("printf('%500s', 'x')"))
    (row,) = await edge.raw(
        "SELECT comment FROM security_audit_events WHERE kind = 'recovery.note'"
    )
    assert len(row["comment"]) == 500
