"""Notes on an edge file, by a plain `sqlite3` connection (the file's owner may write, so the
table's own rules are what stands; that the subject exists is the store's check, and who may
write a note and under which name the store's and the API's, tests/e2e/test_inbox_notes.py):
a note is one printable line on exactly one request or dispatch, and it is never changed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.clock import ManualClock


@pytest.fixture
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[stores.Harness]:
    async with stores.open_harness("sqlite", tmp_path_factory) as harness:
        yield harness


def _note(dispatch_sql: str, text_sql: str = "'checked'") -> str:
    return (
        "INSERT INTO inbox_notes (dispatch_id, principal, note, written_at_ms) "
        f"VALUES ({dispatch_sql}, 'op', {text_sql}, 1)"
    )


async def test_a_note_is_one_line_on_one_subject_and_never_changed(
    edge: stores.Harness, clock: ManualClock
) -> None:
    (consumed,) = await submit_runs(edge.approver_store, clock, 1)
    target = f"'{consumed.dispatch_id}'"
    before = await edge.raw("SELECT * FROM inbox_notes")
    for sql, refusal in (
        (_note(target, "'a' || char(10) || 'b'"), "CHECK constraint failed"),
        (_note(target, "''"), "CHECK constraint failed"),
        (_note("NULL"), "CHECK constraint failed"),
    ):
        with pytest.raises(Exception, match=refusal):
            await edge.raw(sql)
    assert await edge.raw("SELECT * FROM inbox_notes") == before
    await edge.raw(_note(target))
    written = await edge.raw("SELECT * FROM inbox_notes")
    with pytest.raises(Exception, match="inbox_notes is immutable"):
        await edge.raw("UPDATE inbox_notes SET note = 'rewritten'")
    assert await edge.raw("SELECT * FROM inbox_notes") == written
