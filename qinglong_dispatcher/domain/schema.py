"""Migration identities and how a database's applied set compares with a release's files."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from qinglong_dispatcher.domain import errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str
    checksum: str
    amends: frozenset[str] = frozenset()
    """Checksums of earlier texts of this file that a database may have applied: a file is
    amended in place only to close a hole before its later migration does (a fresh database
    then never holds the hole) or to correct its comments, and says so in an
    `-- amends checksum <hex>` line."""

    def accepts(self, applied_checksum: str) -> bool:
        """Whether a database that recorded `applied_checksum` applied this migration."""
        return applied_checksum == self.checksum or applied_checksum in self.amends


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SchemaState:
    """How a database's applied migrations compare with this release's files."""

    pending: tuple[Migration, ...]
    tampered: tuple[int, ...]
    unknown: tuple[int, ...]

    @property
    def current(self) -> bool:
        """Nothing pending, nothing tampered, nothing newer than this release."""
        return not (self.pending or self.tampered or self.unknown)

    def require_current(self) -> None:
        """Raise the typed error that says why the schema cannot be used."""
        if self.tampered:
            raise errors.SchemaTampered(
                f"applied migration {self.tampered[0]:04d} differs from its file (tampered)"
            )
        if self.unknown:
            raise errors.SchemaTooNew(
                f"the database has migration {self.unknown[0]:04d}, unknown to this release"
            )
        if self.pending:
            raise errors.SchemaNotMigrated(
                f"{len(self.pending)} migration(s) pending; run `qinglong-dispatcher migrate`"
            )


def compare(files: tuple[Migration, ...], applied: Mapping[int, str]) -> SchemaState:
    """Compare files with `{version: checksum}` read from `schema_migrations`."""
    known = {m.version: m for m in files}
    return SchemaState(
        pending=tuple(m for m in files if m.version not in applied),
        tampered=tuple(
            v
            for v, checksum in sorted(applied.items())
            if v in known and not known[v].accepts(checksum)
        ),
        unknown=tuple(v for v in sorted(applied) if v not in known),
    )
