"""`builtin.file.write`: bounded plan content into `<sandbox>/<project>/<dispatch id>`, once.

The write is atomic (temp file, fsync, rename, fsync the directory) and idempotent on the
dispatch id: the same content already there is a success, other content a failure. Any
failure before the rename left nothing visible, so it is an explicit failure; a failure at
or after the rename (the file may be visible, its durability unknown) raises, which the
dispatcher records as indeterminate and recovery settles by the file evidence.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import secrets
from pathlib import Path

import anyio.to_thread
import structlog

from qinglong_dispatcher.actions.tool_invoke import sandbox
from qinglong_dispatcher.domain import errors
from qinglong_dispatcher.domain.tools import registry as tool_registry

log = structlog.get_logger("qinglong_dispatcher.actions.tool_invoke.file_write")

DEFINITION = tool_registry.FILE_WRITE_V1
"""The reviewed definition this adapter implements."""


class Code(enum.StrEnum):
    """Low-sensitivity result codes."""

    WRITTEN = "file_written"
    ALREADY_WRITTEN = "file_already_written"
    CONTENT_CONFLICT = "file_content_conflict"
    NOT_REGULAR = "file_target_not_regular"
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"
    WRITE_FAILED = "file_write_failed"
    TOO_LARGE = "content_too_large"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """An explicit outcome: the file holds the content (`succeeded`) or nothing was written."""

    succeeded: bool
    code: Code


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _existing(target: Path, content: bytes) -> Result | None:
    try:
        info = target.lstat()
    except FileNotFoundError:
        return None
    if not os.path.isfile(target) or os.path.islink(target) or info.st_nlink != 1:
        return Result(succeeded=False, code=Code.NOT_REGULAR)
    same = info.st_size == len(content) and target.read_bytes() == content
    return Result(succeeded=same, code=Code.ALREADY_WRITTEN if same else Code.CONTENT_CONFLICT)


def _write_new(directory: Path, target: Path, content: bytes) -> bool:
    """Write a temp file durably and rename it into place; False if nothing became visible."""
    temp = directory / f".{target.name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(temp, flags | getattr(os, "O_CLOEXEC", 0), 0o640)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, target)
    except OSError:
        temp.unlink(missing_ok=True)
        return False
    return True


def write_sync(configured: Path, *, project_id: str, dispatch_id: str, content: bytes) -> Result:
    """The whole write, on the calling thread (see the module docstring)."""
    if len(content) > tool_registry.MAX_CONTENT_BYTES:
        return Result(succeeded=False, code=Code.TOO_LARGE)
    try:
        root = sandbox.root(configured)
        directory = sandbox.project_dir(root, project_id)
        created = not directory.exists()
        directory.mkdir(mode=0o750, exist_ok=True)
        directory = sandbox.require_inside(root, directory)
        target = sandbox.target(root, project_id, dispatch_id)
    except (errors.SandboxUnavailable, OSError):
        return Result(succeeded=False, code=Code.SANDBOX_UNAVAILABLE)
    if created:
        _fsync_directory(root)
    found = _existing(target, content)
    if found is not None:
        return found
    if not _write_new(directory, target, content):
        return Result(succeeded=False, code=Code.WRITE_FAILED)
    _fsync_directory(directory)  # raises after the rename: indeterminate, by design
    return Result(succeeded=True, code=Code.WRITTEN)


class FileWriteAdapter:
    """The reviewed `builtin.file.write` adapter; its idempotency key is the dispatch id."""

    definition = DEFINITION

    def __init__(self, sandbox_dir: Path) -> None:
        self.sandbox_dir = sandbox_dir

    async def sandbox_ready(self) -> bool:
        """Whether the sandbox directory exists now (inspect refuses a missing one)."""
        try:
            await anyio.to_thread.run_sync(sandbox.root, self.sandbox_dir)
        except errors.SandboxUnavailable:
            return False
        return True

    async def write(self, *, project_id: str, dispatch_id: str, content: bytes) -> Result:
        """Write once; runs on a worker thread (file I/O blocks)."""
        result = await anyio.to_thread.run_sync(
            lambda: write_sync(
                self.sandbox_dir, project_id=project_id, dispatch_id=dispatch_id, content=content
            )
        )
        log.info(
            "tool.file_write",
            dispatch_id=dispatch_id,
            project_id=project_id,
            code=result.code.value,
            size=len(content),
        )
        return result
