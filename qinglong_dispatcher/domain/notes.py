"""Notes on inbox rows: a short line an approver or an operator writes on a request or a
dispatch that waits on people, appended and never changed, naming who wrote it."""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from qinglong_dispatcher.domain import errors, records

MAX_CHARS: Final = 500
"""A note's length limit (the table's check holds the same)."""


class Subject(enum.StrEnum):
    """What a note is written on."""

    APPROVAL = "approval"
    """An approval request."""
    DISPATCH = "dispatch"
    """A dispatch (a `recovery_required` one, most often)."""


def check_note(text: str) -> str:
    """A note: one printable line of 1 to `MAX_CHARS` characters (trimmed)."""
    text = text.strip()
    if not 0 < len(text) <= MAX_CHARS or not text.isprintable():
        raise errors.InvalidInput(f"note: one printable line of 1 to {MAX_CHARS} characters")
    return text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Note:
    """One note as stored."""

    note_id: int
    subject: Subject
    subject_id: str
    principal: str
    """Who wrote it: the acting principal, never a caller's word."""
    note: str
    written_at_ms: int
    """The database's clock."""

    @classmethod
    def from_row(cls, row: records.RowLike) -> Note:
        """An `inbox_notes` row."""
        on_approval = row["approval_request_id"] is not None
        return cls(
            note_id=int(row["note_id"]),
            subject=Subject.APPROVAL if on_approval else Subject.DISPATCH,
            subject_id=str(row["approval_request_id"] if on_approval else row["dispatch_id"]),
            principal=str(row["principal"]),
            note=str(row["note"]),
            written_at_ms=int(row["written_at_ms"]),
        )

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {
            "note_id": self.note_id,
            "subject": self.subject.value,
            "id": self.subject_id,
            "principal": self.principal,
            "note": self.note,
            "written_at_ms": self.written_at_ms,
        }
