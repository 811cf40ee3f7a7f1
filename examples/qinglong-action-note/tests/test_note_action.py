"""`example.note.write`'s own tests, on the dispatcher's test kit (`qinglong_dispatcher.testing`):
its plan approved by one principal and another, then claimed, inspected, started, executed
and completed by the real dispatcher on a migrated SQLite file; its evidence provider asked
by the real reconciler after a simulated crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qinglong_action_note import ACTION, notes

from qinglong_dispatcher import testing
from qinglong_dispatcher.domain import errors, recovery


def note(ref: str, text: str = "hello, 世界") -> dict[str, object]:
    return {"schemaVersion": 1, "actionRef": ref, "projectId": "p1", "text": text}


def written_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def notes_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    monkeypatch.setenv(notes.DIR_VARIABLE, str(folder))
    return folder


async def test_a_dispatch_writes_one_note_bound_to_it(tmp_path: Path, notes_dir: Path) -> None:
    async with testing.open_kit(ACTION, tmp_path) as kit:
        done = await kit.dispatch(note("note-1"))
        testing.assert_succeeded(done, code="note_written", attempts=1)
        written = json.loads((notes_dir / f"{done.dispatch_id}.json").read_text("utf-8"))
        assert written["dispatchId"] == done.dispatch_id
        assert written["text"] == "hello, 世界"
        assert written["actionDigest"] == done.detail.dispatch.action_digest
        found = await kit.evidence(done.dispatch_id)
        assert found.kind is recovery.EvidenceKind.VERIFIED_SUCCEEDED
        assert (await kit.tick()).outcomes == {}  # nothing is ever executed twice
        assert written_names(notes_dir) == [f"{done.dispatch_id}.json"]


async def test_without_a_notes_directory_a_dispatch_waits_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(notes.DIR_VARIABLE, raising=False)
    async with testing.open_kit(ACTION, tmp_path) as kit:
        waiting = await kit.dispatch(note("note-2"))
        testing.assert_status(waiting, "retry_wait", code="note_dir_unset", attempts=1)
        folder = tmp_path / "notes"
        folder.mkdir()
        monkeypatch.setenv(notes.DIR_VARIABLE, str(folder))
        kit.advance(60)
        await kit.tick()
        testing.assert_succeeded(await kit.read(waiting.dispatch_id), attempts=2)


async def test_a_plan_of_another_shape_is_refused_before_approval(tmp_path: Path) -> None:
    async with testing.open_kit(ACTION, tmp_path) as kit:
        with pytest.raises(errors.PlanInvalid):
            await kit.submit({**note("note-3"), "colour": "red"})
        with pytest.raises(errors.PlanInvalid):
            await kit.submit(note("note-4", text="bell\a"))


async def test_a_note_of_other_bytes_is_a_conflict_not_a_success(
    tmp_path: Path, notes_dir: Path
) -> None:
    async with testing.open_kit(ACTION, tmp_path) as kit:
        dispatch_id = await kit.submit(note("note-5"))
        (notes_dir / f"{dispatch_id}.json").write_text("someone else's", encoding="utf-8")
        await kit.tick()
        testing.assert_failed(await kit.read(dispatch_id), code="note_conflict")
        found = await kit.evidence(dispatch_id)
        assert (found.kind, found.reason) == (recovery.EvidenceKind.CONFLICT, "note_mismatch")


async def test_after_a_crash_the_evidence_settles_what_happened(
    tmp_path: Path, notes_dir: Path
) -> None:
    async with testing.open_kit(ACTION, tmp_path) as kit:
        written = await kit.crash(note("note-6"), at="after_execute")
        assert (notes_dir / f"{written.dispatch_id}.json").exists()
        not_written = await kit.crash(note("note-7"), at="after_start")
        assert not (notes_dir / f"{not_written.dispatch_id}.json").exists()

        report = await kit.recover()
        assert report.outcomes == {"resolved_succeeded": 1, "missing": 1}
        testing.assert_settled_by_evidence(await kit.read(written.dispatch_id))
        left = await kit.read(not_written.dispatch_id)
        testing.assert_recovery_required(left, outcome="missing", reason="note_missing")
        assert left.executions == 1  # recovery never executes
        assert not (notes_dir / f"{not_written.dispatch_id}.json").exists()
