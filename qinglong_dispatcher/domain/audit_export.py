"""The audit export: its records, its cursor, and the horizon below which no row can still land.

Two streams leave the database: the security audit (`security_audit_events`) and the
execution ledger (`execution_events`). Each is exported in its own `event_id` order, and the
cursor is the pair of the last ids exported (`<audit>.<ledger>`): everything at or below it
was written out. It is safe to resume from only because an exporter never passes a row while
a transaction that may have drawn a lower id is still in progress (the horizon below; the
reasoning is docs/decisions/0043-an-audit-export-below-a-commit-horizon.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Sequence
from typing import Final, Literal

from qinglong_dispatcher.domain import errors, instants

SCHEMA_VERSION: Final = 1
"""`schema_version` of every record (docs/audit/record-v1.schema.json)."""

MAX_PAGE: Final = 1000
"""The most records one page (one API response chunk, one CLI read) holds."""

Source = Literal["audit", "ledger"]

_CURSOR = re.compile(r"([0-9]{1,18})\.([0-9]{1,18})")
_MAX_CANDIDATES: Final = 16


@dataclasses.dataclass(frozen=True, order=True, slots=True)
class Cursor:
    """A position in both streams: the last audit and ledger event ids exported (0: none)."""

    audit: int = 0
    ledger: int = 0

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """The cursor an export printed (`12.40`); `InvalidInput` for anything else."""
        found = _CURSOR.fullmatch(text)
        if found is None:
            raise errors.InvalidInput("after: must be a cursor <audit>.<ledger> as printed")
        return cls(int(found.group(1)), int(found.group(2)))

    def __str__(self) -> str:
        return f"{self.audit}.{self.ledger}"

    def covers(self, other: Cursor) -> bool:
        """Whether both positions of `other` are at or below this one's."""
        return other.audit <= self.audit and other.ledger <= self.ledger


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Probe:
    """What one read of the database saw: each stream's highest committed id, and the
    transactions then able to write each table (by their virtual transaction id; none on
    SQLite, where writers are serialised and a reader sees only whole commits)."""

    audit_max: int
    ledger_max: int
    audit_writers: frozenset[str] = frozenset()
    ledger_writers: frozenset[str] = frozenset()


class Horizon:
    """The highest ids below which every row that will ever commit has committed.

    PostgreSQL draws identity values before commit, so a transaction can commit id 10 after
    id 11 is visible. A probe reads the highest visible id L first and the transactions then
    holding a table's write lock W after it: any transaction that drew an id at or below L
    held the lock before L was read, so it is in W or was over by then. Once every member of
    W has ended, no row at or below L can still appear: L is safe. Until then the export stops
    below the last safe L. The table's lock is taken before an identity value is drawn (the
    INSERT locks its target when it is planned), which is what makes W complete.
    """

    def __init__(self, start: Cursor | None = None) -> None:
        self._audit: list[tuple[int, frozenset[str]]] = []
        self._ledger: list[tuple[int, frozenset[str]]] = []
        self.safe = start or Cursor()

    def observe(self, probe: Probe) -> Cursor:
        """Take one more probe; the horizon now (never lower than before)."""
        self.safe = Cursor(
            _advance(self._audit, self.safe.audit, probe.audit_max, probe.audit_writers),
            _advance(self._ledger, self.safe.ledger, probe.ledger_max, probe.ledger_writers),
        )
        return self.safe

    @property
    def pending(self) -> bool:
        """Whether a probe saw rows that are not yet below the horizon."""
        return bool(self._audit or self._ledger)


def _advance(
    candidates: list[tuple[int, frozenset[str]]], safe: int, seen: int, writers: frozenset[str]
) -> int:
    """One stream's horizon after a probe: the highest candidate whose writers all ended."""
    if seen > safe:
        candidates.append((seen, writers))
    for highest, waited in candidates:
        if not waited & writers:
            safe = max(safe, highest)
    candidates[:] = [c for c in candidates if c[0] > safe]
    if len(candidates) > _MAX_CANDIDATES:
        # Dropping a candidate only delays the horizon; keep the oldest and the newest ones.
        del candidates[_MAX_CANDIDATES // 2 : -_MAX_CANDIDATES // 2]
    return safe


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """One exported row: an audit record or a ledger line, as schema v1 names its fields."""

    source: Source
    event_id: int
    committed_at_ms: int
    kind: str
    principal: str | None = None
    actor: str | None = None
    token_id: str | None = None
    session_id: str | None = None
    client_address: str | None = None
    request_id: str | None = None
    trace_id: str | None = None
    project_id: str | None = None
    subject_id: str | None = None
    detail_code: str | None = None
    dispatch_id: str | None = None
    version: int | None = None
    from_status: str | None = None
    to_status: str | None = None
    attempt: int | None = None
    lease_owner: str | None = None
    mutation_id: str | None = None
    result_code: str | None = None

    def key(self) -> tuple[int, int, int]:
        """Where it falls when the two streams are interleaved: by commit time, then audit
        before ledger, then id (each stream's own order is its id order regardless)."""
        return (self.committed_at_ms, 0 if self.source == "audit" else 1, self.event_id)

    def as_dict(self, cursor: Cursor) -> dict[str, object]:
        """The record as schema v1 prints it; `cursor` is the position just after it."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            "schema_version": SCHEMA_VERSION,
            "cursor": str(cursor),
            "at": instants.rfc3339(self.committed_at_ms),
            **fields,
        }


LEDGER_KIND: Final = "execution.transition"
"""`kind` of every ledger line (its `to_status` says which)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """Records in export order, each with the cursor just after it, and the cursor after all."""

    records: tuple[tuple[Record, Cursor], ...]
    after: Cursor


def merge(
    after: Cursor, audits: Sequence[Record], ledgers: Sequence[Record], *, limit: int
) -> Page:
    """Interleave the two streams' next rows (each in id order) by `Record.key`, at most
    `limit`; the cursor moves past exactly the rows taken."""
    taken: list[tuple[Record, Cursor]] = []
    a = ledger = 0
    position = after
    while len(taken) < limit and (a < len(audits) or ledger < len(ledgers)):
        use_audit = ledger >= len(ledgers) or (
            a < len(audits) and audits[a].key() <= ledgers[ledger].key()
        )
        if use_audit:
            record = audits[a]
            a += 1
            position = Cursor(record.event_id, position.ledger)
        else:
            record = ledgers[ledger]
            ledger += 1
            position = Cursor(position.audit, record.event_id)
        taken.append((record, position))
    return Page(tuple(taken), position)


def parse_since(text: str) -> int:
    """`--since`/`since`: an RFC 3339 time with its offset (`2026-12-01T00:00:00Z`), as ms."""
    try:
        if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)", text):
            raise ValueError(text)
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise errors.InvalidInput(
            "since: must be an RFC 3339 time with its offset, like 2026-12-01T00:00:00Z"
        ) from None
    return int(moment.timestamp() * 1000)
