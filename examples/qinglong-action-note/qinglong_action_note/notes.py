"""The notes directory and its files: the effect, written whole or not at all, and read back.

These are blocking filesystem calls; the handler and the evidence provider run them on a
worker thread.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from qinglong_action_note.plan import NotePlan
from qinglong_dispatcher.domain import canonical, errors, records

DIR_VARIABLE = "QINGLONG_ACTION_NOTE_DIR"


def directory() -> Path:
    """The notes directory; it must exist (nothing here creates it)."""
    configured = os.environ.get(DIR_VARIABLE)
    if not configured:
        raise errors.ConfigurationError(f"{DIR_VARIABLE} is not set", code="note_dir_unset")
    path = Path(configured)
    if not path.is_dir():
        raise errors.ConfigurationError(
            f"{DIR_VARIABLE} is not a directory", code="note_dir_missing"
        )
    return path


def record(plan: NotePlan, dispatch: records.Dispatch) -> bytes:
    """The file's exact bytes: bound to the dispatch and to what was approved."""
    return canonical.dumps(
        {
            "dispatchId": dispatch.dispatch_id,
            "actionDigest": dispatch.action_digest,
            "text": plan.text,
        }
    )


def write(directory: Path, dispatch_id: str, content: bytes) -> str:
    """Create `<dispatch id>.json` whole or not at all; `written`, `existing` or `conflict`."""
    target = directory / f"{dispatch_id}.json"
    temporary = directory / f".{dispatch_id}.{os.getpid()}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, target)
        outcome = "written"
    except FileExistsError:
        outcome = "existing" if target.read_bytes() == content else "conflict"
    finally:
        temporary.unlink()
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the new name is durable before we report success
    finally:
        os.close(descriptor)
    return outcome


def read(dispatch_id: str) -> bytes | None:
    with contextlib.suppress(FileNotFoundError):
        return (directory() / f"{dispatch_id}.json").read_bytes()
    return None
