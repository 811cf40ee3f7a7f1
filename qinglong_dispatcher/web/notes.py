"""`POST /api/v1/inbox/notes` (`approver` or `operator`): a note on a request or a dispatch
that waits on people, written by the store acting as the token's principal (on PostgreSQL the
database names that principal and refuses any other; a body naming one is a 400)."""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from qinglong_dispatcher.domain import errors, notes, plans
from qinglong_dispatcher.web import auth, context, problems, writing

MEMBERS = ("subject", "id", "note")


def _subject(value: object) -> notes.Subject:
    try:
        return notes.Subject(value if isinstance(value, str) else "")
    except ValueError:
        raise problems.BadField("subject", "subject: approval or dispatch") from None


async def note_as(ctx: context.Context, admitted: writing.Write) -> notes.Note:
    """Append the body's note as the admitted principal (the API's route, the UI's forms)."""
    del ctx  # the acting store is the admitted write's
    subject = _subject(admitted.body.get("subject"))
    subject_id = admitted.body.get("id")
    if not isinstance(subject_id, str) or not plans.is_identifier(subject_id):
        raise problems.BadField("id", "id: the request's or the dispatch's id")
    text = admitted.body.get("note")
    if not isinstance(text, str):
        raise problems.BadField("note", "note: required")
    try:
        checked = notes.check_note(text)
    except errors.InvalidInput as exc:
        raise problems.BadField("note", str(exc)) from None
    return await admitted.store.write_note(subject, subject_id, checked)


@auth.requires(auth.Operation.NOTE)
async def write_note(request: web.Request) -> web.Response:
    """`POST /api/v1/inbox/notes` `{"subject": "approval"|"dispatch", "id", "note"}` → 201
    `{"note"}`."""
    admitted = await writing.begin(request, MEMBERS)
    if isinstance(admitted, web.Response):
        return admitted
    written = await note_as(context.of(request), admitted)
    return writing.ok({"note": written.as_dict()}, status=201)


def by_subject(found: Iterable[notes.Note]) -> dict[str, list[notes.Note]]:
    """Notes grouped by their subject's id, oldest first."""
    grouped: dict[str, list[notes.Note]] = {}
    for note in found:
        grouped.setdefault(note.subject_id, []).append(note)
    return grouped
