"""Notes on inbox rows: written as the acting principal, read by anyone who reads the rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from qinglong_dispatcher.domain import notes


class NoteStore(Protocol):
    """Append and read notes (docs/ui.md)."""

    async def write_note(self, subject: notes.Subject, subject_id: str, note: str) -> notes.Note:
        """Append a note as the store's principal (an approver's or operator's);
        `ApprovalNotFound`/`DispatchNotFound` when its subject does not exist. On PostgreSQL
        the database names the acting principal and refuses any other."""
        ...

    async def notes_for(
        self, approval_ids: Sequence[str], dispatch_ids: Sequence[str]
    ) -> list[notes.Note]:
        """The notes on these requests and dispatches, oldest first."""
        ...
