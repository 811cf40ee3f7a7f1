"""A consistent copy of a live SQLite file: SQLite's online backup, beside a running daemon.

The copy is taken through a read transaction of its own (`sqlite3.Connection.backup` with
every page in one step), so in WAL mode it holds exactly what was committed when it began,
and the daemon keeps writing meanwhile. The target is written as a new 0600 file next to
its final name and renamed into place only once it is whole and passes `quick_check`, so a
half-written backup never carries the final name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from pathlib import Path

from qinglong_dispatcher.adapters.sqlite import database
from qinglong_dispatcher.adapters.sqlite_file import access, integrity
from qinglong_dispatcher.domain import errors


def backup(source: Path, target: Path, *, busy_timeout_s: float) -> int:
    """Copy the live file `source` to the new file `target` (refused if it exists); the bytes
    written. The copy is in rollback-journal mode, a single file: `migrate` or `run` opening
    it turns WAL back on."""
    if os.path.lexists(target):
        raise errors.ConfigurationError(f"{target} exists already; back up into a new file")
    # The live file first: a missing or foreign one is refused before anything is written.
    live = database.connect(source, busy_timeout_s=busy_timeout_s, create=False)
    temp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    try:
        try:
            access.create_private(temp)
        except OSError as exc:
            raise errors.StoreUnavailable(f"{target} cannot be written ({exc.strerror})") from None
        copy = sqlite3.connect(temp, isolation_level=None)
        try:
            live.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")
            problem = integrity.quick_check(copy)
            if problem is not None:
                raise errors.StoreCorrupted(f"the backup of {source} is damaged: {problem}")
        finally:
            copy.close()
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.link(temp, target)  # refuses an existing name, where rename would clobber it
        size = target.stat().st_size
    except sqlite3.Error as exc:
        raise database.translate(exc) from exc
    except FileExistsError:
        raise errors.ConfigurationError(
            f"{target} exists already; back up into a new file"
        ) from None
    except OSError as exc:
        raise errors.StoreUnavailable(f"{target} cannot be written ({exc.strerror})") from None
    finally:
        live.close()
        with contextlib.suppress(OSError):
            temp.unlink()
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    return size
