"""Notes on inbox rows over a real listener, real tokens and both databases: an operator's or
an approver's note is stored under its token's principal and shown in the inbox (API and UI)
and on the dispatch page; a viewer writes none (403), a body naming a principal is refused
(400), a note is one printable line, and nothing is written by a refusal. (On an edge file the
store is the authority on the writer's name; on PostgreSQL the database holds it too:
tests/security/test_hostile_inbox_notes.py.)"""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, assert_problem, serving
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.ui_client import UiClient


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def _notes(it: Served) -> list[dict[str, object]]:
    return await it.harness.raw(
        f"SELECT principal, note, dispatch_id FROM {it.table('inbox_notes')} ORDER BY note_id"
    )


async def test_a_note_is_the_writers_and_shown_on_its_row(served: Served) -> None:
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 1)
    stuck, _ = await started_execution(it.harness, past)
    body = {"subject": "dispatch", "id": stuck.dispatch_id, "note": "paging the router team"}

    before = await _notes(it)
    assert_problem(await it.call("POST", "/inbox/notes", "vic", body), 403, "forbidden")
    for bad in (
        {**body, "principal": it.names["alice"]},
        {**body, "note": "two\nlines"},
        {**body, "note": " "},
        {**body, "subject": "run"},
        {**body, "id": "not an id"},
    ):
        assert_problem(await it.call("POST", "/inbox/notes", "carol", bad), 400, "invalid_input")
    assert_problem(
        await it.call("POST", "/inbox/notes", "carol", {**body, "id": "d-none"}),
        404,
        "dispatch_not_found",
    )
    assert await _notes(it) == before

    status, _, answer = await it.call("POST", "/inbox/notes", "carol", body)
    assert status == 201, answer
    assert answer["note"]["principal"] == it.names["carol"]
    assert await _notes(it) == [
        {
            "principal": it.names["carol"],
            "note": "paging the router team",
            "dispatch_id": stuck.dispatch_id,
        }
    ]
    status, _, inbox = await it.call("GET", "/inbox", "carol")
    assert status == 200, inbox
    (row,) = inbox["items"]
    assert [(n["principal"], n["note"]) for n in row["notes"]] == [
        (it.names["carol"], "paging the router team")
    ]

    async with UiClient(it) as ui:
        await ui.sign_in("carol")
        _, _, page = await ui.get("/ui/inbox")
        assert "paging the router team" in page
        assert 'form="note-0"' in page  # the row's note field, outside the bulk form
        status, headers, _ = await ui.post(
            "/ui/inbox/note",
            {"subject": "dispatch", "id": stuck.dispatch_id, "note": "router rebooted"},
        )
        assert status == 303
        assert headers["Location"] == f"/ui/dispatches/{stuck.dispatch_id}"
        _, _, page = await ui.get(f"/ui/dispatches/{stuck.dispatch_id}")
        said = html.escape(it.names["carol"])
        assert "paging the router team" in page
        assert "router rebooted" in page
        assert said in page
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, page = await ui.get(f"/ui/dispatches/{stuck.dispatch_id}")
        assert "router rebooted" in page  # a viewer reads notes
        assert "/ui/inbox/note" not in page  # and is offered no form to write one
