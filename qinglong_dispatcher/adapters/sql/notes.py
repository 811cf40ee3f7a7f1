"""Note transactions (both dialects): append one as the store's principal, read some.

On PostgreSQL the statement writes the acting principal and the guard of migration 0036
refuses any other, so `principal` below is SQLite's alone (the store's authenticated one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from qinglong_dispatcher.adapters.sql import query
from qinglong_dispatcher.domain import approvals, errors, notes, permissions


async def write_note(
    q: query.Query,
    principal: approvals.Principal,
    subject: notes.Subject,
    subject_id: str,
    note: str,
) -> notes.Note:
    """Append a note on an existing request or dispatch."""
    on_approval = subject is notes.Subject.APPROVAL
    params: dict[str, object] = {
        "approval_request_id": subject_id if on_approval else None,
        "dispatch_id": None if on_approval else subject_id,
    }
    found = await q.one("note_subject", params)
    if found is None or not found["found"]:
        if on_approval:
            raise errors.ApprovalNotFound(f"approval request {subject_id} not found")
        raise errors.DispatchNotFound(f"dispatch {subject_id} not found")
    row = await q.one(
        "insert_note", {**params, "principal": principal.name, "note": notes.check_note(note)}
    )
    assert row is not None
    return notes.Note.from_row(row)


async def notes_for(
    q: query.Query, approval_ids: Sequence[str], dispatch_ids: Sequence[str]
) -> list[notes.Note]:
    """The notes on these requests and dispatches, oldest first."""
    if not approval_ids and not dispatch_ids:
        return []
    params = {
        "approval_ids": json.dumps(list(approval_ids)),
        "dispatch_ids": json.dumps(list(dispatch_ids)),
    }
    return [notes.Note.from_row(row) for row in await q.all("select_notes", params)]


class NoteMethods:
    """The store's note operations (`ports.NoteStore`), a transaction each."""

    runner: query.Runner
    approver: approvals.Principal

    async def write_note(self, subject: notes.Subject, subject_id: str, note: str) -> notes.Note:
        """See `ports.NoteStore.write_note` (the store's principal must be permitted)."""
        self.approver.require(permissions.Operation.NOTE)
        return await self.runner.transaction(
            lambda q: write_note(q, self.approver, subject, subject_id, note)
        )

    async def notes_for(
        self, approval_ids: Sequence[str], dispatch_ids: Sequence[str]
    ) -> list[notes.Note]:
        """See `ports.NoteStore.notes_for`."""
        return await self.runner.transaction(
            lambda q: notes_for(q, approval_ids, dispatch_ids), write=False
        )
